"""The optional C extensions (everything else is in pyproject.toml).

All are optional: without a C compiler the install still succeeds and detok uses its numpy/Python
paths (same results, slower). Declared here because setuptools' pyproject form for extension
modules is still experimental and warns on every install.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # the compiled inner loop of the worker's batched decode
        Extension("detok._native._plainstep", ["detok/_native/_plainstep.c"], depends=["detok/_native/_utf8.h", "detok/_native/_textbuf.h"],
                  optional=True),
        # DecodeStream's compiled start, one-id step and end
        Extension("detok._native._streamcore", ["detok/_native/_streamcore.c"], depends=["detok/_native/_utf8.h", "detok/_native/_textbuf.h"],
                  optional=True),
        # the workers' gather of logprob token strings
        Extension("detok._native._tokenstrings", ["detok/_native/_tokenstrings.c"], optional=True),
        # the workers' chat logprobs items, written per step (requests with logprobs_form "chat")
        Extension("detok._native._chatentries", ["detok/_native/_chatentries.c"],
                  depends=["detok/_native/_jsonfloats.h", "detok/_native/_textbuf.h"], optional=True),
        # the frontend's chat logprobs JSON, written per chunk, and a batch's entries cut per request
        Extension("detok._native._chatlogprobs", ["detok/_native/_chatlogprobs.c"],
                  depends=["detok/_native/_jsonfloats.h", "detok/_native/_textbuf.h"], optional=True),
        # the receiving loop's text-only chunk: taken, rendered, framed and written in one call; and a
        # received batch's text rows written as they are dispatched (DeltaReceiver.direct_rows)
        Extension("detok._native._chunkpush",
                  ["detok/_native/_chunkpush.c", "detok/_native/_directrows.c", "detok/_native/_typedrows.c",
                   "detok/_native/_streamfields.c"],
                  depends=["detok/_native/_textpusher.h", "detok/_native/_streamfields.h"], optional=True),
        Extension("detok._native._logprobrows", ["detok/_native/_logprobrows.c"], optional=True),
        # the frontend's latency clock, ticked once per streamed chunk
        Extension("detok._native._latency", ["detok/_native/_latency.c"], optional=True),
    ]
)
