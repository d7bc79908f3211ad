"""Compiled models on disk, shared by processes (npu_device options op_compiler_cache_mode,
op_compiler_cache_dir, op_compiler_cache_max_size; the caller passes them in).

One file per compiled model, `<dir>/<key>.npuc`:

    magic "NPUCACHE" | u32 entry version | key (64 hex chars) | u64 payload length |
    sha256(key + payload) (32 bytes) | payload (the compiled model, docs/compiled_model_format.md)

The key (`request_key`) is a sha256 of everything that decides the compiled model: the compile
request in canonical bytes (the cluster GraphDef or eager op NodeDef with its input shapes,
dtypes and compile-time values, maps serialized in sorted order), the compile options,
`compiler_version()`, and what the caller adds (npu_device: the device memory the compiler
checks values against and a hash of the runtime library that will run the model).

Writes go to a temporary file in the same directory and are renamed into place (os.replace is
atomic on POSIX), so a reader sees a whole entry or none, however many processes share the
directory and whenever one of them dies; no lock file is needed (two writers of one key write
the same model, the last rename wins). Temporary files a killed writer left behind are removed
by later writers. The header's sha256 catches what a rename cannot: a file damaged on disk, or
cut short by a power loss before the page cache was written (entries are not fsynced: a lost
entry only costs a compile). A bad entry is deleted and reported once, and the caller compiles.

The size is bounded: a writer lists the directory and deletes the least recently used entries
(a hit touches the entry's mtime, so mtime is the last use) until the total is within the
bound. Listing costs a stat per entry (about 8 us each), so a process lists at its first write
and then only when its running total (the last listing plus its own writes) would pass the
bound or RESCAN_SECONDS have passed: other processes' writes can overshoot the bound by what
they wrote within that time. Nothing here raises for a broken directory: it reports the problem
once per directory and behaves as a cache that misses.
"""
import hashlib
import logging
import os
import struct
import tempfile
import threading
import time

from graph_engine.compiler import model_format
from graph_engine.compiler import options as ge_options

MAGIC = b"NPUCACHE"
ENTRY_VERSION = 1
SUFFIX = ".npuc"
TEMP_PREFIX = ".tmp-"
_HEADER = struct.Struct("<8sI64sQ32s")
# Temporary files of writers whose pid is not alive are removed once this old (the age guards
# a directory shared by machines, where another machine's pid means nothing here); older than
# STALE_TEMP_SECONDS they are removed whatever their pid says (a pid reused).
DEAD_WRITER_TEMP_SECONDS = 60
STALE_TEMP_SECONDS = 3600
RESCAN_SECONDS = 60
# Test hooks. Seconds a writer sleeps after writing its temporary file and before renaming it,
# so tests can kill a process mid-write; and a compiler version that replaces the source hash
# (npu_device then pins its runtime hash too),
# so tests of the cache's mechanics hold while the source tree is being edited.
WRITE_PAUSE_ENV = "NPU_TEST_COMPILE_CACHE_WRITE_PAUSE"
VERSION_ENV = "NPU_TEST_COMPILER_VERSION"

_version = None
_version_lock = threading.Lock()


def compiler_version():
    """A hash of what makes this compiler produce what it produces: the source of
    graph_engine/compiler and graph_engine/ops (.py and .json files: passes, kernels chosen,
    op registry), the compiled model format VERSION, this cache's entry version and
    TensorFlow's version (op definitions and attr defaults come from it).

    The package version would not do: editable installs change the compiler without changing
    it, and a model from older compiler code would run silently. Hashing the source costs a few
    milliseconds once per process and invalidates every entry after any change, comments
    included, which costs one recompile."""
    global _version
    pinned = os.environ.get(VERSION_ENV)
    if pinned:
        return hashlib.sha256(f"pinned {pinned}".encode()).hexdigest()[:32]
    with _version_lock:
        if _version is None:
            try:
                from tensorflow.python.framework.versions import VERSION as tf_version
            except ImportError:
                tf_version = "unknown"
            h = hashlib.sha256(f"format {model_format.VERSION}; entry {ENTRY_VERSION}; "
                               f"tensorflow {tf_version}\n".encode())
            root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # graph_engine/
            for sub in ("compiler", "ops"):
                for dirpath, dirnames, filenames in os.walk(os.path.join(root, sub)):
                    dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                    for name in sorted(filenames):
                        if not name.endswith((".py", ".json")):
                            continue
                        path = os.path.join(dirpath, name)
                        h.update(os.path.relpath(path, root).encode() + b"\0")
                        with open(path, "rb") as f:
                            h.update(f.read())
                        h.update(b"\0")
            _version = h.hexdigest()[:32]
        return _version


def request_key(request, opts, extra=""):
    """The cache key (64 hex chars) of a compile request (a serialized NodeDef, as
    graph_engine.compiler.api.compile_model takes it) compiled with the compile options `opts`
    (the dict given to compile_model); `extra` names anything else the compiler reads from the
    process (device memory). Raises on a request that is not a NodeDef."""
    from tensorflow.core.framework import graph_pb2, node_def_pb2
    nd = node_def_pb2.NodeDef.FromString(bytes(request))
    if "cluster" in nd.attr and nd.attr["cluster"].s:
        # The body as the compiler sees it, in canonical bytes (protobuf maps -- every node's
        # attrs -- serialize in no fixed order otherwise).
        body = graph_pb2.GraphDef.FromString(nd.attr["cluster"].s)
        nd.attr["cluster"].s = body.SerializeToString(deterministic=True)
        # Its identity hashes the body as serialized, which varies from process to process; the
        # key has the body canonical, and the options, already.
        nd.attr.pop("cluster_key", None)
    h = hashlib.sha256(b"npu_device compile cache\0")
    for part in (compiler_version(), ge_options.to_json(opts), str(extra)):
        h.update(part.encode() + b"\0")
    h.update(nd.SerializeToString(deterministic=True))
    return h.hexdigest()


def _entry(key, payload):
    digest = hashlib.sha256(key.encode() + payload).digest()
    return _HEADER.pack(MAGIC, ENTRY_VERSION, key.encode(), len(payload), digest) + payload


def check_entry(data, key):
    """The payload of an entry's bytes, or raises ValueError saying what is wrong."""
    if len(data) < _HEADER.size:
        raise ValueError(f"truncated: {len(data)} bytes, shorter than the header")
    magic, version, stored_key, length, digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError("not a compile cache entry (bad magic)")
    if version != ENTRY_VERSION:
        raise ValueError(f"entry version {version}, this reader supports {ENTRY_VERSION}")
    if stored_key != key.encode():
        raise ValueError("it holds another key")
    payload = data[_HEADER.size:]
    if len(payload) != length:
        raise ValueError(f"truncated or padded: payload of {len(payload)} bytes, the header "
                         f"says {length}")
    if hashlib.sha256(stored_key + payload).digest() != digest:
        raise ValueError("checksum mismatch")
    return payload


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


class DiskCache:
    """The entries of one directory. Thread-safe and shareable by processes; never raises for
    I/O problems (get misses, put returns False) but reports each kind once to `log`."""

    def __init__(self, directory, log=None):
        self.directory = str(directory)
        self._log = log or logging.getLogger(__name__)
        self._reported = set()
        self._lock = threading.Lock()
        self._estimate = None      # bytes of entries: the last listing plus writes since
        self._listed_at = 0.0      # time.monotonic() of the last listing

    def path(self, key):
        return os.path.join(self.directory, key + SUFFIX)

    def _report_once(self, what, message):
        with self._lock:
            if what in self._reported:
                return
            self._reported.add(what)
        self._log.warning("npu_device: %s", message)

    def _unusable(self, doing, error):
        self._report_once("unusable", (
            f"cannot {doing} the compile cache directory {self.directory!r} "
            f"({error.strerror or error}); compiling without it (options op_compiler_cache_dir, "
            f"op_compiler_cache_mode)"))

    def get(self, key):
        """The payload stored under `key`, or None. A damaged entry is deleted and reported."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None     # not stored (or no directory yet)
        except OSError as e:
            self._unusable("read", e)
            return None
        try:
            payload = check_entry(data, key)
        except ValueError as e:
            self.discard(key, str(e))
            return None
        try:
            os.utime(path)  # the last use, for LRU eviction
        except OSError:
            pass            # a read-only shared cache still serves
        return payload

    def discard(self, key, reason):
        """Deletes a bad entry, saying so (one line per entry)."""
        path = self.path(key)
        try:
            os.unlink(path)
            outcome = "deleted it"
        except FileNotFoundError:
            outcome = "another process deleted it"
        except OSError as e:
            outcome = f"could not delete it: {e.strerror or e}"
        self._log.warning("npu_device: compile cache entry %s is corrupt (%s); %s and compiling "
                          "again", path, reason, outcome)

    def put(self, key, payload, max_bytes):
        """Stores `payload` under `key` atomically, then evicts least recently used entries
        until the directory holds at most `max_bytes`. Returns whether the entry was written
        (False: larger than max_bytes alone, or the directory is unusable)."""
        entry = _entry(key, bytes(payload))
        if len(entry) > max_bytes:
            self._log.debug("npu_device: a compiled model of %d bytes is larger than "
                            "op_compiler_cache_max_size (%d); not cached on disk", len(entry),
                            max_bytes)
            return False
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f"{TEMP_PREFIX}{os.getpid()}-",
                                       suffix=SUFFIX)
        except OSError as e:
            self._unusable("write to", e)
            return False
        try:
            try:
                os.fchmod(fd, 0o644)   # mkstemp's 0600 would hide entries from other users
                view = memoryview(entry)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            pause = os.environ.get(WRITE_PAUSE_ENV)
            if pause:
                time.sleep(float(pause))
            os.replace(tmp, self.path(key))
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            self._unusable("write to", e)
            return False
        with self._lock:
            if (self._estimate is not None and self._estimate + len(entry) <= max_bytes
                    and time.monotonic() - self._listed_at < RESCAN_SECONDS):
                self._estimate += len(entry)
                return True
        self.evict(max_bytes)
        return True

    def entries(self):
        """(path, size, mtime) of every entry, and the stale temporary files of dead writers."""
        found, stale = [], []
        now = time.time()
        try:
            with os.scandir(self.directory) as it:
                for e in it:
                    try:
                        if e.name.endswith(SUFFIX) and not e.name.startswith(TEMP_PREFIX):
                            st = e.stat(follow_symlinks=False)
                            found.append((e.path, st.st_size, st.st_mtime))
                        elif e.name.startswith(TEMP_PREFIX):
                            st = e.stat(follow_symlinks=False)
                            pid = e.name[len(TEMP_PREFIX):].split("-", 1)[0]
                            dead = pid.isdigit() and not _pid_alive(int(pid))
                            if (dead and now - st.st_mtime > DEAD_WRITER_TEMP_SECONDS) or \
                                    now - st.st_mtime > STALE_TEMP_SECONDS:
                                stale.append(e.path)
                    except FileNotFoundError:
                        continue     # removed by another process meanwhile
        except FileNotFoundError:
            pass
        return found, stale

    def evict(self, max_bytes):
        """Deletes least recently used entries until at most `max_bytes` remain; removes the
        temporary files that killed writers left. Returns the number of entries deleted."""
        try:
            found, stale = self.entries()
        except OSError as e:
            self._unusable("list", e)
            return 0
        for path in stale:
            try:
                os.unlink(path)
                self._log.debug("npu_device: removed %s, left by a writer that died", path)
            except OSError:
                pass
        total = sum(size for _, size, _ in found)
        deleted = 0
        for path, size, _ in sorted(found, key=lambda f: f[2]):
            if total <= max_bytes:
                break
            try:
                os.unlink(path)
                deleted += 1
            except FileNotFoundError:
                pass         # another process evicted it: it is gone all the same
            except OSError:
                continue
            total -= size
        with self._lock:
            self._estimate, self._listed_at = total, time.monotonic()
        if deleted:
            self._log.debug("npu_device: evicted %d compile cache entries from %s (bound %d "
                            "bytes)", deleted, self.directory, max_bytes)
        return deleted
