"""One JSON value, validated as its text arrives, passed on as the raw text the model wrote.

Tool arguments are streamed as the model's own text (never re-serialized diffs, the cause of vLLM
#10395, "Hermes tool parser output error stream arguments"). The stream only passes on text that is
a valid JSON prefix, or one whose string ends in an escape's backslash: a number or literal is held
until it is complete, an escape's characters after its backslash until its last one, a comma until
the next member starts. So `close()` can always end what was passed on as valid JSON when the value
is cut short (end of output, a closing marker, or text that is not JSON): a backslash left alone
becomes an escaped backslash (`\\\\`; also for an invalid escape), an open string is closed, a key
left without a value gets `null`, open containers are closed. A container opened past
`MAX_ARGUMENT_DEPTH` levels fails the value there (a log line), as text that is not JSON does. One leniency: a raw control character
inside a string (models write raw newlines in code) is passed on escaped (`\\n`), so the result
parses under strict JSON.

Cost: linear in the text; runs of string characters are taken by one regex match.
"""

from __future__ import annotations

import re

from detok.parsing.limits import MAX_ARGUMENT_DEPTH
from detok.parsing.malformed import ENDS_THERE, log_malformed

STRING_RUN = _STRING_RUN = re.compile(r'[^"\\\x00-\x1f]+')
_STRING_PART = re.compile(r'(?:[^"\\\x00-\x1f]+|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
_ESCAPE = re.compile(r'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})')
_ESCAPE_PREFIX = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?\Z")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_CHARS = re.compile(r"[-+0-9.eE]*")
_SPACE = re.compile(r"[ \t\n\r]*")
_LITERALS = ("true", "false", "null")
# text that, fed inside a string with nothing held, cannot end the string nor fail: characters other
# than quote and backslash, complete escapes, at most one unfinished escape at its end
SAFE_IN_STRING = re.compile(r'(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*(?:\\(?:u[0-9a-fA-F]{0,3})?)?')

# what the scanner expects next
_VALUE, _VALUE_OR_CLOSE, _KEY_OR_CLOSE, _KEY, _COLON, _COMMA_OR_CLOSE, _DONE = range(7)


def _escape_control(c: str) -> str:
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}.get(c, f"\\u{ord(c):04x}")


class JsonValueStream:
    """Feed text; get back the part that is certainly a valid prefix of one JSON value, and, once the
    value is complete, the text after it. Leading whitespace before the value is skipped."""

    __slots__ = ("_stack", "_expect", "_in_string", "_key", "_held", "_esc_sent", "_comma", "started", "done", "failed")

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._expect = _VALUE
        self._in_string = False
        self._key = False
        self._held = ""  # an unfinished number, literal or escape
        # `_held` is an escape whose backslash was passed on already: a backslash goes out at once
        # (the worker's compiled path passes an id ending in one on; detok.stream.typed_fast), so
        # the text passed on never depends on where the ids were cut
        self._esc_sent = False
        self._comma = ""  # a comma (and the spaces after it) not passed on until the next member starts
        self.started = False
        self.done = False
        self.failed = False

    def feed(self, text: str) -> tuple[str, str | None]:
        """Return (valid text to pass on, the text after the value or None while it is not done).
        On a failure (`failed` set) the text from the offending character on is returned as the
        rest; later feeds are ignored; call `close()`."""
        if self._in_string and not self._held and _STRING_RUN.fullmatch(text):
            return text, None  # the common case: more of a string
        if self.done or self.failed:
            return "", (text if self.done else None)
        buf = self._held + text if self._held else text
        self._held = ""
        sent = self._esc_sent  # buf[0] is a backslash passed on already
        self._esc_sent = False
        out: list[str] = []
        i, n = 0, len(buf)
        stack = self._stack
        while i < n:
            if self._in_string:
                j = _STRING_PART.match(buf, i).end()  # characters and complete escapes, at once
                if j > i:
                    out.append(buf[i + 1 : j] if sent and i == 0 else buf[i:j])
                    i = j
                    if i >= n:
                        break
                c = buf[i]
                if c == '"':
                    out.append('"')
                    i += 1
                    self._in_string = False
                    if self._key:
                        self._expect = _COLON
                    elif self._after_value():
                        return "".join(out), buf[i:]
                elif c == "\\":
                    m = _ESCAPE.match(buf, i)
                    if m is not None:
                        out.append(m.group())
                        i = m.end()
                    elif _ESCAPE_PREFIX.match(buf, i):
                        self._held = buf[i:]
                        if not (sent and i == 0):
                            out.append("\\")
                        self._esc_sent = True
                        break
                    else:  # not an escape: as if its backslash came alone (passed on at once),
                        # then the character that fails; `close` completes the backslash
                        if not (sent and i == 0):
                            out.append("\\")
                        self._esc_sent = True
                        self.failed = True
                        i += 1
                        break
                else:
                    out.append(_escape_control(c))
                    i += 1
                continue
            c = buf[i]
            if c in " \t\n\r":
                j = _SPACE.match(buf, i).end()
                if self._comma:
                    self._comma += buf[i:j]
                elif self.started:
                    out.append(buf[i:j])
                i = j
                continue
            expect = self._expect
            if expect == _VALUE or expect == _VALUE_OR_CLOSE:
                if c == "]" and expect == _VALUE_OR_CLOSE:
                    out.append(c)
                    i += 1
                    stack.pop()
                    if self._after_value():
                        return "".join(out), buf[i:]
                    continue
                if c == "{" or c == "[" or c == '"':
                    if c != '"' and len(stack) >= MAX_ARGUMENT_DEPTH:  # past the bound: as text not JSON
                        log_malformed(f"JSON nested deeper than {MAX_ARGUMENT_DEPTH} levels", ENDS_THERE)
                        self.failed = True
                        break
                    self._start_member(out)
                    out.append(c)
                    i += 1
                    if c == '"':
                        self._in_string, self._key = True, False
                    else:
                        stack.append(c)
                        self._expect = _KEY_OR_CLOSE if c == "{" else _VALUE_OR_CLOSE
                    continue
                if c == "-" or "0" <= c <= "9":
                    if _NUMBER_CHARS.match(buf, i).end() == n:  # may go on in the next text
                        self._held = buf[i:]
                        break
                    m = _NUMBER.match(buf, i)
                    if m is None:
                        self.failed = True
                        break
                    self._start_member(out)
                    out.append(m.group())
                    i = m.end()
                    if self._after_value():
                        return "".join(out), buf[i:]
                    continue
                for lit in _LITERALS:
                    if buf.startswith(lit, i):
                        self._start_member(out)
                        out.append(lit)
                        i += len(lit)
                        break
                    if lit.startswith(buf[i:]):
                        self._held = buf[i:]
                        i = n
                        break
                else:
                    self.failed = True
                    break
                if i < n or not self._held:
                    if self._after_value():
                        return "".join(out), buf[i:]
                continue
            if expect == _KEY_OR_CLOSE or expect == _KEY:
                if c == '"':
                    self._start_member(out)
                    out.append(c)
                    i += 1
                    self._in_string, self._key = True, True
                    continue
                if c == "}" and expect == _KEY_OR_CLOSE:
                    out.append(c)
                    i += 1
                    stack.pop()
                    if self._after_value():
                        return "".join(out), buf[i:]
                    continue
                self.failed = True
                break
            if expect == _COLON:
                if c == ":":
                    out.append(c)
                    i += 1
                    self._expect = _VALUE
                    continue
                self.failed = True
                break
            # _COMMA_OR_CLOSE
            if c == ",":
                self._comma = ","
                i += 1
                self._expect = _KEY if stack[-1] == "{" else _VALUE
                continue
            if (c == "}" and stack[-1] == "{") or (c == "]" and stack[-1] == "["):
                out.append(c)
                i += 1
                stack.pop()
                if self._after_value():
                    return "".join(out), buf[i:]
                continue
            self.failed = True
            break
        if self.failed:
            return "".join(out), buf[i:]
        return "".join(out), None

    def resume_escaped(self) -> None:
        """Inside a string with nothing held, a backslash was passed on by someone else (the
        worker's compiled path): the next text completes its escape."""
        if not self._in_string or self._held or self.done or self.failed:
            raise ValueError("a backslash passed on outside a JSON string's plain text")
        self._held = "\\"
        self._esc_sent = True

    def _start_member(self, out: list[str]) -> None:
        self.started = True
        if self._comma:
            out.append(self._comma)
            self._comma = ""

    def _after_value(self) -> bool:
        """A value (scalar or container) ended; True when it was the outermost one."""
        if not self._stack:
            self._expect = _DONE
            self.done = True
            return True
        self._expect = _COMMA_OR_CLOSE
        return False

    def close(self) -> str:
        """The text that ends what was passed on as valid JSON ("" when it is complete or nothing was
        passed on). A held complete number is passed on; other held text is dropped."""
        if self.done or not (self.started or self._held):
            return ""
        out: list[str] = []
        held, self._held = self._held, ""
        if held and not self._in_string and _NUMBER.fullmatch(held):
            self._start_member(out)
            out.append(held)
            self._expect = _COMMA_OR_CLOSE if self._stack else _DONE
        if not self.started:
            return ""
        if self._in_string:
            if self._esc_sent:  # a backslash passed on alone: made an escaped backslash
                out.append("\\")
                self._esc_sent = False
            out.append('": null' if self._key else '"')
            self._in_string = False
        elif self._expect == _COLON:
            out.append(": null")
        elif self._expect == _VALUE and self._stack and self._stack[-1] == "{":
            out.append(" null")
        out.extend("}" if c == "{" else "]" for c in reversed(self._stack))
        self._stack.clear()
        self._comma = ""
        self.done = True
        return "".join(out)
