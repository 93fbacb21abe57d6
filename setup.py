"""The optional C extensions (everything else is in pyproject.toml).

All are optional: without a C compiler the install still succeeds and detok uses its numpy/Python
paths (same results, slower). Declared here because setuptools' pyproject form for extension
modules is still experimental and warns on every install.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # the compiled inner loop of the worker's batched decode
        Extension("detok.stream._plainstep", ["detok/stream/_plainstep.c"], depends=["detok/stream/_utf8.h", "detok/_textbuf.h"],
                  optional=True),
        # DecodeStream's compiled start, one-id step and end
        Extension("detok.stream._streamcore", ["detok/stream/_streamcore.c"], depends=["detok/stream/_utf8.h", "detok/_textbuf.h"],
                  optional=True),
        # the workers' gather of logprob token strings
        Extension("detok.worker._tokenstrings", ["detok/worker/_tokenstrings.c"], optional=True),
        # the workers' chat logprobs items, written per step (requests with logprobs_form "chat")
        Extension("detok.worker._chatentries", ["detok/worker/_chatentries.c"],
                  depends=["detok/_jsonfloats.h", "detok/_textbuf.h"], optional=True),
        # the frontend's chat logprobs JSON, written per chunk, and a batch's entries cut per request
        Extension("detok.frontend._chatlogprobs", ["detok/frontend/_chatlogprobs.c"],
                  depends=["detok/_jsonfloats.h", "detok/_textbuf.h"], optional=True),
        # the receiving loop's text-only chunk: taken, rendered, framed and written in one call; and a
        # received batch's text rows written as they are dispatched (DeltaReceiver.direct_rows)
        Extension("detok.frontend._chunkpush",
                  ["detok/frontend/_chunkpush.c", "detok/frontend/_directrows.c", "detok/frontend/_typedrows.c",
                   "detok/frontend/_streamslots.c"],
                  depends=["detok/frontend/_textpusher.h", "detok/frontend/_streamslots.h"], optional=True),
        Extension("detok.receiver._logprobrows", ["detok/receiver/_logprobrows.c"], optional=True),
        # the frontend's latency clock, ticked once per streamed chunk
        Extension("detok.frontend._latency", ["detok/frontend/_latency.c"], optional=True),
    ]
)
