"""Typed output: reasoning and tool-call parsing, run in the workers where the text is made.

A request's `OutputParsing` (carried in its registration) names a reasoning parser and/or a tool-call
parser. The worker feeds the request's raw text, step by step, as `Piece`s: plain text, or the exact text
of one marker token (detected by id, so a one-token marker is never split). The parsers turn it into
`TypedDelta`s: reasoning text, content text and tool-call deltas. Joined, the deltas are the same however
the text was grouped into pieces (property-tested).

Layout: `types` (messages and the piece protocol), `family_table` / `family_tables` (every family a
table: grammar, terminals, start state, as data), `reasoning/` and `tools/` (the grammars' engines,
a module per grammar, and the machinery they share), `limits` (every bound, the request's and the model's),
`malformed` (the log line of a call past them), `registry` (names, aliases, marker checks), `output`
(reasoning then tools, composed per request).
"""
