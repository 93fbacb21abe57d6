"""The `invoke_parameters` grammar's engine: calls as `invoke`/`parameter` XML elements, the tag
strings table terminals (`detok.parsing.family_tables`: MiniMax M2 / M3, DeepSeek V3.2 / V4's DSML).

    START
    <invoke name="NAME">
    <parameter name="P">value</parameter>
    </invoke>
    END

DSML writes each tag with `｜DSML｜` after its `<` or `</`, and a parameter's `string="true"` (a raw
string) or `string="false"` (JSON). Values are typed by the request's schema as qwen3_coder's are (as
vLLM's DSML engine, a schema type wins over the attribute); a parameter the schema does not type is
a string, or with `string="false"` its JSON (the text where it is not JSON). The edges are
xml_parameters': its engine runs this grammar with these tags. The differences: a name may be quoted
or bare (MiniMax's template quotes it; vLLM's minimax_m2 takes either), and an `invoke` tag outside
the region is text (vLLM's parsers look for calls only inside it).
"""

from __future__ import annotations

import re

from detok.parsing.tools.xml_parameters import XmlParametersToolParser

# a tag's text up to its `>`: a quoted or bare name, then maybe a `string` attribute
_HEADER = re.compile(r"""\s*(?:"([^"]*)"|'([^']*)'|([^\s"']+))\s*(?:string\s*=\s*"(true|false)")?\s*""")


def tags(prefix: str) -> tuple[str, str, str, str]:
    """The invoke and parameter tags with `prefix` after each `<` / `</` (DSML's `｜DSML｜`)."""
    return f"<{prefix}invoke name=", f"</{prefix}invoke>", f"<{prefix}parameter name=", f"</{prefix}parameter>"


class InvokeParametersToolParser(XmlParametersToolParser):
    function, function_end, parameter, parameter_end = tags("")
    bare_calls = False

    def _header(self, text: str) -> tuple[str, str | None]:
        m = _HEADER.fullmatch(text)
        if m is None:  # not a name and attributes: the text itself (a function's is then not a name)
            return text.strip(), None
        name = next(g for g in m.group(1, 2, 3) if g is not None)
        return name, m.group(4)
