"""Socket security: ZeroMQ CURVE (authenticated, encrypted) on every tcp socket, keys on disk.

Trust model: one keypair per deployment, made by `detok keygen DIR` (`DIR/detok.key`, public;
`DIR/detok.key_secret`, secret, mode 0600). Every detok process of the deployment (scheduler
client, workers, supervisor, frontends, stub) holds the secret key; a peer is trusted exactly when
it proves it holds it. Each binding socket is a CURVE server with the deployment keypair and a ZAP
authenticator that admits only the deployment's public key; each connecting socket is a CURVE
client that expects that server key. A peer without the secret key cannot complete the handshake,
so nothing it sends reaches detok (CURVE also encrypts the traffic).

Why not one keypair per role: every detok process both binds and connects (a worker binds its
input and connects to the notice socket and to frontends), so per-role keys would give every
process its own secret plus the list of every peer's public key, without narrowing whom a stolen
secret lets in (any role's secret reaches the sockets that role talks to). One deployment secret is
as strong against outsiders and has one file to distribute and rotate.

`ipc://` endpoints need no keys: they live in a 0700 directory (`detok.wire.endpoints.IpcDir`). A tcp
endpoint without keys is refused (`InsecureTransportError`) unless the caller passes
`insecure=True` (`--insecure` on the command line).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import zmq

if TYPE_CHECKING:  # imported when used: zmq.auth pulls in asyncio, which workers without keys never need
    from zmq.auth.thread import ThreadAuthenticator

log = logging.getLogger("detok.security")

KEY_NAME: Final = "detok"  # DIR/detok.key (public) and DIR/detok.key_secret (secret)
ZAP_DOMAIN: Final = "detok"
_REFUSAL_LOG_EVERY_S: Final = 10.0  # a foreign peer retries its handshake every 100 ms: log it rarely


class InsecureTransportError(ValueError):
    """A tcp endpoint without CURVE keys and without an explicit `insecure=True`."""


class KeyFileError(ValueError):
    """Keys missing, unreadable, malformed or readable by other users."""


@dataclass(frozen=True)
class CurveKeys:
    """The deployment keypair (Z85-encoded, 40 bytes each)."""

    public: bytes
    secret: bytes

    def __post_init__(self) -> None:
        for name, key in (("public", self.public), ("secret", self.secret)):
            if not isinstance(key, bytes) or len(key) != 40:
                raise KeyFileError(f"the {name} CURVE key must be 40 bytes of Z85")
        if zmq.curve_public(self.secret) != self.public:
            raise KeyFileError("the public CURVE key does not belong to the secret key")

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> CurveKeys:
        """The keypair `detok keygen` wrote into `directory`. The secret file must not be readable
        by others, nor by group unless root owns it (like ssh: a key anyone can read is no secret)."""
        path = Path(directory) / f"{KEY_NAME}.key_secret"
        try:
            _check_secret_mode(path)
        except OSError as e:
            raise KeyFileError(f"no CURVE secret key at {path} ({e.strerror}): run `detok keygen {directory}`") from None
        import zmq.auth

        try:
            public, secret = zmq.auth.load_certificate(path)
        except (OSError, ValueError) as e:
            raise KeyFileError(f"cannot read the CURVE keys in {path}: {e}") from None
        if secret is None:
            raise KeyFileError(f"{path} holds no secret key")
        return cls(public, secret)

    @classmethod
    def generate(cls) -> CurveKeys:
        """A new keypair in memory (tests, benchmarks)."""
        public, secret = zmq.curve_keypair()
        return cls(public, secret)

    def __repr__(self) -> str:  # never print the secret
        return f"CurveKeys(public={self.public.decode()!r})"


def _check_secret_mode(path: Path) -> None:
    """The secret key file must be private: mode 0600 or less, or, owned by root, 0640 or less.

    The second form is PostgreSQL's rule for its server key, and how Kubernetes mounts a Secret
    for a non-root pod: the file belongs to root and is readable by the pod's `fsGroup` (the
    kubelet adds group read to the mode of every file of the volume), never by others.
    """
    st = path.stat()  # follows the symlinks a Secret volume's files are
    mode = stat.S_IMODE(st.st_mode)
    allowed = stat.S_IRWXU | (stat.S_IRGRP if st.st_uid == 0 else 0)
    if mode & ~allowed & (stat.S_IRWXG | stat.S_IRWXO):
        rule = "chmod 600 it (or 640 and owned by root)"
        raise KeyFileError(f"{path} is accessible by other users (mode {mode:o}): {rule}")


def generate_keys(directory: str | os.PathLike[str], *, overwrite: bool = False) -> tuple[Path, Path]:
    """Write a new deployment keypair into `directory` (created 0700 if missing): the public key
    file and the secret key file (mode 0600, created so before any key is written into it)."""
    import zmq.auth

    target = Path(directory)
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    public, secret = target / f"{KEY_NAME}.key", target / f"{KEY_NAME}.key_secret"
    if not overwrite and (public.exists() or secret.exists()):
        raise FileExistsError(f"keys already exist in {target} (overwrite them explicitly)")
    secret.unlink(missing_ok=True)
    os.close(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    zmq.auth.create_certificates(target, KEY_NAME)  # rewrites both files; the secret keeps mode 0600
    os.chmod(secret, 0o600)
    return public, secret


def resolve_keys(keys: CurveKeys | str | os.PathLike[str] | None) -> CurveKeys | None:
    """Keys given as a CurveKeys, a key directory, or None."""
    if keys is None or isinstance(keys, CurveKeys):
        return keys
    return CurveKeys.load(keys)


def is_tcp(endpoint: str) -> bool:
    return endpoint.startswith("tcp://")


class SocketSecurity:
    """How one owner secures its sockets: CURVE with `keys` on tcp, nothing on ipc, and tcp
    without keys only when `insecure`. Call `close()` before terminating the context of any
    socket bound with `bind` (it stops the ZAP authenticator it uses)."""

    def __init__(self, keys: CurveKeys | str | os.PathLike[str] | None = None, insecure: bool = False) -> None:
        self.keys = resolve_keys(keys)
        self.insecure = insecure
        self._authenticated: list[int] = []  # contexts whose authenticator this owner holds

    def check(self, endpoint: str) -> None:
        """InsecureTransportError for a tcp endpoint this owner may not use in the clear."""
        if is_tcp(endpoint) and self.keys is None and not self.insecure:
            raise InsecureTransportError(
                f"{endpoint}: tcp endpoints need CURVE keys (keys=DIR, --keys DIR; make them with "
                "`detok keygen DIR`) or an explicit insecure=True / --insecure"
            )

    def connect(self, sock: zmq.Socket, endpoint: str) -> None:
        self.check(endpoint)
        if is_tcp(endpoint) and self.keys is not None:
            sock.curve_secretkey = self.keys.secret
            sock.curve_publickey = self.keys.public
            sock.curve_serverkey = self.keys.public
        sock.connect(endpoint)

    def bind(self, sock: zmq.Socket, endpoint: str) -> None:
        self.check(endpoint)
        if is_tcp(endpoint) and self.keys is not None:
            ctx = sock.context
            if ctx.underlying not in self._authenticated:
                _acquire_authenticator(ctx, self.keys.public)
                self._authenticated.append(ctx.underlying)
            sock.zap_domain = ZAP_DOMAIN.encode()
            sock.curve_secretkey = self.keys.secret
            sock.curve_publickey = self.keys.public
            sock.curve_server = True
        sock.bind(endpoint)

    def close(self) -> None:
        """Release the ZAP authenticator threads this owner started or shares. Idempotent."""
        for underlying in self._authenticated:
            _release_authenticator(underlying)
        self._authenticated.clear()

    def __enter__(self) -> SocketSecurity:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _AllowKey:
    """ZAP credentials provider: only the deployment's public key is let in."""

    def __init__(self, public: bytes) -> None:
        self._public = public
        self.refused = 0
        self._logged_at = -_REFUSAL_LOG_EVERY_S

    def callback(self, domain: str, key: bytes) -> bool:
        allowed = domain == ZAP_DOMAIN and key == self._public
        if not allowed:
            self.refused += 1
            now = time.monotonic()
            if now - self._logged_at >= _REFUSAL_LOG_EVERY_S:
                self._logged_at = now
                log.warning("refused a CURVE peer with an unknown key (%d refusals so far)", self.refused)
        return allowed


# One ZAP authenticator per libzmq context (the ZAP endpoint is per context), shared by every owner
# binding in that context (e.g. a scheduler's client and its request inbox), refcounted.
_lock = threading.Lock()
_authenticators: dict[int, tuple[ThreadAuthenticator, int]] = {}


def _acquire_authenticator(ctx: zmq.Context, public: bytes) -> None:
    from zmq.auth.thread import ThreadAuthenticator

    with _lock:
        found = _authenticators.get(ctx.underlying)
        if found is not None:
            _authenticators[ctx.underlying] = (found[0], found[1] + 1)
            return
        # the authenticator's own sockets are blocking ones, in a sync shadow of the same context
        auth = ThreadAuthenticator(zmq.Context.shadow(ctx.underlying), log=log)
        auth.start()
        auth.configure_curve_callback(ZAP_DOMAIN, _AllowKey(public))
        _authenticators[ctx.underlying] = (auth, 1)


def _release_authenticator(underlying: int) -> None:
    with _lock:
        found = _authenticators.get(underlying)
        if found is None:
            return
        auth, users = found
        if users > 1:
            _authenticators[underlying] = (auth, users - 1)
            return
        del _authenticators[underlying]
    auth.stop()
