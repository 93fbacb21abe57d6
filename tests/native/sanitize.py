"""`make sanitize`: detok's extensions built with gcc's AddressSanitizer and UBSan, and the tests of
the compiled paths run on them; non-zero on any sanitizer report, a test failure, or a control that
was not caught.

    python -m tests.native.sanitize [pytest args...]   (test paths among them replace the list)

1. The source tree is copied to a temporary folder (the clone's own build is left alone) and
   setup.py's extensions are built there in place with -fsanitize=address,undefined
   (-fno-sanitize-recover: a UBSan finding stops the process). Every extension setup.py lists must
   have built (they are optional, so a failed one would otherwise just be missing).
2. Negative controls, built the same way (tests/native/sanitizer_control.c): a heap write one past
   an allocation and a signed overflow, each run under the same environment, must each end the
   process with a report; otherwise the run proves nothing.
3. The files of entry_points.COMPILED_PATH_TESTS (and their children processes: PYTHONPATH points
   at the copy) run with the runtimes preloaded (the interpreter itself is not instrumented),
   PYTHONMALLOC=malloc (so ASan sees every object's allocation), leak detection off (the
   interpreter's own allocations at exit are not detok's), output not captured (a child process's
   report reaches the same stderr): any AddressSanitizer report (also written to a log folder) or
   UBSan "runtime error" line fails the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.native.entry_points import COMPILED_PATH_TESTS, ROOT, setup_extensions

SANITIZE = "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
COPIED = ("detok", "tests", "scheduler_stub", "reference_engine", "bench", "setup.py", "pyproject.toml", "MANIFEST.in",
          "README.md")


def runtime(name: str) -> str:
    path = subprocess.run(["gcc", f"-print-file-name={name}"], check=True, capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(path):
        raise SystemExit(f"sanitize: gcc has no {name} (install gcc's sanitizer runtimes)")
    return path


def build_env() -> dict[str, str]:
    return {**os.environ, "CC": "gcc", "CFLAGS": f"{SANITIZE} -g -O1", "LDFLAGS": f"-fsanitize=address,undefined"}


def run_env(copy: Path, logs: Path) -> dict[str, str]:
    return {
        **os.environ,
        "LD_PRELOAD": f"{runtime('libasan.so')} {runtime('libubsan.so')}",
        "PYTHONMALLOC": "malloc",
        "ASAN_OPTIONS": f"detect_leaks=0:log_path={logs}/asan:abort_on_error=0:exitcode=86",
        # (gcc's UBSan runtime writes to stderr whatever its log_path says)
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87",
        "PYTHONPATH": str(copy),
        "HF_HUB_OFFLINE": "1",
        "DETOK_STRICT_SKIPS": "1",
    }


def copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("*.so", "__pycache__", ".hypothesis", "build", "dist", "*.egg-info")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)


def build(copy: Path) -> None:
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=copy, env=build_env(), check=True)
    missing = [m for m in setup_extensions(copy / "setup.py") if not list((copy / m.replace(".", "/")).parent.glob(
        m.rsplit(".", 1)[1] + ".*.so"))]
    if missing:
        raise SystemExit(f"sanitize: not built with the sanitizers: {missing}")
    control = ("from setuptools import Extension, setup; setup(name='control', script_args=['-q', 'build_ext', "
               "'--inplace'], ext_modules=[Extension('sanitizer_control', ['tests/native/sanitizer_control.c'])])")
    subprocess.run([sys.executable, "-c", control], cwd=copy, env=build_env(), check=True)


MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "SUMMARY: UndefinedBehaviorSanitizer")


def reports(logs: Path, stderr: str = "") -> list[str]:
    """The sanitizers' reports: ASan's log files, and the report lines in `stderr`."""
    found = [p.read_text(errors="replace") for p in sorted(logs.iterdir())]
    return found + [line for line in stderr.splitlines() if any(m in line for m in MARKERS)]


def check_controls(copy: Path, logs: Path) -> None:
    """Each deliberate fault ends its process with the sanitizer's report (in the log folder)."""
    for call, expected in (("write_past_end(16)", "heap-buffer-overflow"),
                           ("overflow_int(1)", "signed integer overflow")):
        done = subprocess.run([sys.executable, "-c", f"import sanitizer_control; sanitizer_control.{call}"],
                              cwd=copy, env=run_env(copy, logs), capture_output=True, text=True)
        found = reports(logs, done.stderr)
        if done.returncode == 0 or not any(expected in r for r in found):
            raise SystemExit(f"sanitize: the control {call} was not caught (exit {done.returncode}, reports {found!r})")
        print(f"sanitize: control {call} caught: exit {done.returncode}, {expected}")
        for p in logs.iterdir():
            p.unlink()


def check_loaded(copy: Path, logs: Path) -> None:
    """The tests will import the sanitized copy (not the clone's build) with the runtime loaded."""
    modules = list(setup_extensions(copy / "setup.py"))
    probe = ("import importlib, sys; mods = [importlib.import_module(m) for m in sys.argv[1:]]; "
             f"assert all(m.__file__.startswith({str(copy)!r}) for m in mods), [m.__file__ for m in mods]")
    subprocess.run([sys.executable, "-c", probe, *modules], cwd=copy, env=run_env(copy, logs), check=True)


def main(pytest_args: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="detok-sanitize-") as tmp:
        copy, logs = Path(tmp) / "src", Path(tmp) / "logs"
        copy.mkdir()
        logs.mkdir()
        copy_tree(copy)
        build(copy)
        check_controls(copy, logs)
        check_loaded(copy, logs)
        named = [a for a in pytest_args if not a.startswith("-") and (copy / a.split("::")[0]).exists()]
        # (--timeout: the instrumented build and malloc-backed objects run the tests several times slower)
        tests = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-n", "0", "--timeout=1800",
                                  *([] if named else COMPILED_PATH_TESTS), *pytest_args], cwd=copy, env=run_env(copy, logs),
                                 stderr=subprocess.PIPE, text=True, errors="replace")
        assert tests.stderr is not None
        stderr = []
        for line in tests.stderr:
            sys.stderr.write(line)
            stderr.append(line)
        code = tests.wait()
        found = reports(logs, "".join(stderr))
        for text in found:
            print(text, file=sys.stderr)
        print(f"sanitize: pytest exit {code}, {len(found)} sanitizer report(s)")
        return 1 if code or found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
