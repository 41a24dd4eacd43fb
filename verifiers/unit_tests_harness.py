"""The sandbox-side programs of the ``unit_tests`` verifier, kept as source text.

They run inside the sandbox as ``python3 -I -S -c HARNESS_SOURCE`` with the standard
library only (no gymhub there), so they live here as strings rather than as modules
the host would import. :mod:`gymhub.verifiers.unit_tests` explains the design.
"""

__all__ = ["COMMON", "HARNESS_SOURCE"]

# Shipped as source (``python3 -I -S -c``): stdlib only, no gymhub inside the sandbox.
# COMMON: the plain-data codec and length-prefixed frames, used by harness and worker.
COMMON = r"""
import builtins, os, struct, sys

MAX_DEPTH = 1000
LIMIT = 16 << 20
sys.setrecursionlimit(4 * MAX_DEPTH)
_SEQS = ((tuple, b"t"), (list, b"l"), (frozenset, b"F"), (set, b"S"))
_MAKE = {b"t": tuple, b"l": list, b"F": frozenset, b"S": set}

def enc(v, out, d=0):
    # Appends the tagged bytes of a plain-data value to the list ``out``.
    if d > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if v is None:
        out.append(b"N")
    elif isinstance(v, bool):
        out.append(b"T" if v is True else b"B")
    elif isinstance(v, int):
        out.append(b"i%x;" % int(v) if int(v) >= 0 else b"j%x;" % -int(v))
    elif isinstance(v, float):
        out.append(b"f" + struct.pack(">d", float(v)))
    elif isinstance(v, complex):
        out.append(b"c" + struct.pack(">dd", float(v.real), float(v.imag)))
    elif isinstance(v, str):
        data = str.__str__(v).encode("utf-8", "surrogatepass")
        out.append(b"s%d:" % len(data) + data)
    elif isinstance(v, (bytes, bytearray)):
        out.append(b"y%d:" % len(v) + bytes(v))
    elif isinstance(v, dict):
        out.append(b"d%d:" % len(v))
        for k, x in list(dict.items(v)):
            enc(k, out, d + 1)
            enc(x, out, d + 1)
    else:
        for t, tag in _SEQS:
            if isinstance(v, t):
                items = list(v)
                out.append(tag + b"%d:" % len(items))
                for x in items:
                    enc(x, out, d + 1)
                return
        raise TypeError("a value of type %s cannot cross the test boundary (plain data only)"
                        % type(v).__name__)

def _num(b, i, end):
    j = b.index(end, i)
    return b[i:j], j + 1

def dec(b, i=0, d=0):
    # Decodes one value at ``b[i:]``; returns (value, next index). Builds only plain data.
    if d > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    tag = b[i:i + 1]
    i += 1
    if tag == b"N":
        return None, i
    if tag in (b"T", b"B"):
        return tag == b"T", i
    if tag in (b"i", b"j"):
        digits, i = _num(b, i, b";")
        n = int(digits, 16)
        return (n if tag == b"i" else -n), i
    if tag == b"f":
        return struct.unpack(">d", b[i:i + 8])[0], i + 8
    if tag == b"c":
        re_, im = struct.unpack(">dd", b[i:i + 16])
        return complex(re_, im), i + 16
    size, i = _num(b, i, b":")
    n = int(size)
    if n < 0 or (tag in (b"s", b"y") and i + n > len(b)):
        raise ValueError("truncated value")
    if tag == b"s":
        return b[i:i + n].decode("utf-8", "surrogatepass"), i + n
    if tag == b"y":
        return bytes(b[i:i + n]), i + n
    items = []
    for _ in range(n * 2 if tag == b"d" else n):
        x, i = dec(b, i, d + 1)
        items.append(x)
    if tag == b"d":
        return dict(zip(items[::2], items[1::2])), i
    if tag in _MAKE:
        return _MAKE[tag](items), i
    raise ValueError("malformed value")

def pack(v):
    out = []
    enc(v, out)
    return b"".join(out)

def unpack(b):
    v, i = dec(b)
    if i != len(b):
        raise ValueError("trailing bytes")
    return v

def send(fd, v, data=None):
    data = pack(v) if data is None else data
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]

def readn(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return buf

def recv(fd):
    # One frame, or None at end of file; a frame over LIMIT is refused.
    head = readn(fd, 4)
    if head is None:
        return None
    n = struct.unpack(">I", head)[0]
    if n > LIMIT:
        raise ValueError("message too large")
    body = readn(fd, n)
    return None if body is None else unpack(body)
"""

# _WORKER: loads the solution once, then forks per call; untrusted once the solution ran.
_WORKER = r"""
R, W = os.dup(0), os.dup(1)
_nul = os.open(os.devnull, os.O_RDWR)
for _fd in (0, 1, 2):
    os.dup2(_nul, _fd)
try:
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")  # under memory pressure the kernel kills a worker, not the harness
except OSError:
    pass
try:
    import resource
    _mem = int(sys.argv[1]) << 20
    _hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    _mem = _mem if _hard < 0 or _mem < _hard else _hard
    resource.setrlimit(resource.RLIMIT_AS, (_mem, _mem))
except (ImportError, ValueError, OSError):
    pass

def _text(e):
    try:
        return str(e)[:300]
    except BaseException:
        return "?"

builtins.exit = builtins.quit = sys.exit  # as in a normal interpreter (-S leaves them out)

def _load():
    code, entry_point = recv(R)
    ns = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(compile(code, "solution.py", "exec"), ns)
    except BaseException as e:
        return None, "the solution raised while loading: %s: %s" % (type(e).__name__, _text(e))
    fn = ns.get(entry_point)
    if not callable(fn):
        return None, "the solution does not define %s()" % entry_point
    return fn, None

FN, ERR = _load()
send(W, ["ready", ERR])
while FN is not None:
    msg = recv(R)
    if msg is None:
        os._exit(0)
    seq, args, kwargs = msg
    pid = os.fork()
    if pid == 0:
        try:
            try:
                data = pack(["r", seq, "ok", FN(*args, **kwargs)])
            except BaseException as e:
                data = pack(["r", seq, "exc", type(e).__name__, _text(e)])
            send(W, None, data)
        finally:
            os._exit(0)
    send(W, ["e", seq, os.waitpid(pid, 0)[1]])
os._exit(0)
"""

# _HARNESS: the trusted sandbox pid 1 that runs the tests and reports to the host.
_HARNESS = r"""
import _signal as signal, marshal, time

def _harden():
    try:
        import ctypes
        return ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE = 0
    except Exception:
        return False

HARDENED = _harden()
# As the pid namespace's init the kernel drops SIGSTOP/SIGKILL sent from inside, so no
# candidate can stop this process (the host trusts a starvation verdict only then).
PID1 = os.getpid() == 1
for _n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGPIPE"):
    signal.signal(getattr(signal, _n), signal.SIG_IGN)

# BaseException subclasses: a test's ``except Exception`` must not swallow them.
class Deadline(BaseException):
    pass

class SolutionDied(BaseException):
    pass

class SolutionError(Exception):
    pass

_deadline = [float("inf")]

def _on_alarm(signum, frame):
    if time.monotonic() >= _deadline[0] - 0.002:  # ignore early SIGALRMs sent by others
        raise Deadline()

signal.signal(signal.SIGALRM, _on_alarm)

def arm(seconds):
    _deadline[0] = time.monotonic() + seconds
    signal.setitimer(signal.ITIMER_REAL, seconds)

def disarm():
    _deadline[0] = float("inf")
    signal.setitimer(signal.ITIMER_REAL, 0)

def rebuild(name, text):
    cls = getattr(builtins, str(name), None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(text)
        except Exception:
            pass
    elif isinstance(cls, type) and issubclass(cls, BaseException):
        return SolutionDied("the solution raised %s" % name)
    return SolutionError("%s: %s" % (name, text))

class Candidate:
    # The worker holding the loaded solution; started again after a death or timeout.

    def __init__(self, code, entry_point, memory_mb):
        self.code, self.entry_point, self.memory_mb = code, entry_point, memory_mb
        self.pid = self.r = self.w = None
        self.seq, self.load_error = 0, None

    def start(self):
        r_req, w_req = os.pipe()
        r_res, w_res = os.pipe()
        null = os.open(os.devnull, os.O_RDWR)
        try:
            self.pid = os.posix_spawn(
                sys.executable, [sys.executable, "-I", "-S", "-c", WORKER, str(self.memory_mb)],
                {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}, setsid=True,
                file_actions=[(os.POSIX_SPAWN_DUP2, r_req, 0), (os.POSIX_SPAWN_DUP2, w_res, 1),
                              (os.POSIX_SPAWN_DUP2, null, 2)])
        finally:
            for fd in (r_req, w_res, null):
                os.close(fd)
        self.r, self.w = r_res, w_req
        try:
            send(self.w, [self.code, self.entry_point])
            msg = recv(self.r)
        except BaseException:
            self.kill()
            raise
        if not isinstance(msg, list) or len(msg) != 2 or msg[0] != "ready" or msg[1] is not None:
            err = msg[1] if isinstance(msg, list) and len(msg) == 2 else None
            self.kill()
            raise SolutionDied(str(err or "the solution exited while loading"))

    def kill(self):
        for fd in (self.r, self.w):
            if fd is not None:
                os.close(fd)
        self.r = self.w = None
        if self.pid is not None:
            for fn in (lambda: os.killpg(self.pid, 9), lambda: os.kill(self.pid, 9),
                       lambda: os.waitpid(self.pid, 0)):
                try:
                    fn()
                except OSError:
                    pass
            self.pid = None
        if PID1:  # daemons that left the worker's session die with it (not the harness)
            try:
                os.kill(-1, 9)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:  # reap orphans re-parented to pid 1
                pass
        except ChildProcessError:
            pass

    def __call__(self, *args, **kwargs):
        if self.load_error is not None:
            raise SolutionDied(self.load_error)
        pack([args, kwargs])  # fails here, in the test, if an argument is not plain data
        if self.pid is None:
            self.start()
        self.seq += 1
        result = end = None
        try:
            send(self.w, [self.seq, args, kwargs])
            while end is None:
                try:
                    msg = recv(self.r)
                except (ValueError, TypeError, IndexError, struct.error, UnicodeError):
                    raise SolutionDied("the solution's process sent a malformed message")
                if msg is None:
                    raise SolutionDied("the solution's process died")
                if not isinstance(msg, list) or len(msg) < 3 or msg[1] != self.seq:
                    continue
                if msg[0] == "r" and result is None:
                    result = msg
                elif msg[0] == "e":
                    end = msg[2]
        except BaseException:
            self.kill()
            raise
        if result is None:
            raise SolutionDied("the call ended without a result (exit status %r)" % (end,))
        if result[2] == "ok" and len(result) == 4:
            return result[3]
        if result[2] == "exc" and len(result) == 5:
            raise rebuild(result[3], result[4])
        raise SolutionDied("malformed result")

def run_case(src, ns, timeout, probe):
    # One deadline per case, its failure probe included: a candidate that answers wrong
    # just in time and then sleeps in the probe must not get two deadlines, or it could
    # overrun the host's wall budget and pass for a starved host.
    end = time.monotonic() + timeout
    try:
        try:
            arm(timeout)
            exec(compile(src, "<test>", "exec"), ns)
        finally:
            disarm()
        return "passed", ""
    except Deadline:
        return "timeout", "exceeded %gs" % timeout
    except AssertionError as e:
        msg = str(e) or "assertion failed"
        left = end - time.monotonic()
        if probe and left > 0.001:
            try:
                try:
                    arm(left)
                    msg += "; got %s" % repr(eval(probe, ns))[:200]
                finally:
                    disarm()
            except BaseException:
                pass
        return "failed", msg
    except SolutionDied as e:
        return "error", str(e)
    except BaseException as e:
        return "error", "%s: %s" % (type(e).__name__, str(e)[:300])

def main():
    req = marshal.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    nonce, timeout, memory_mb = req["nonce"], req["timeout_s"], req["memory_mb"]

    def emit(*fields):
        line = " ".join(str(f).replace("\n", " ").replace("\r", " ") for f in fields)
        sys.stdout.write(nonce + " " + line + "\n")
        sys.stdout.flush()

    emit("start", "pid1" if PID1 else "pid%d" % os.getpid(),
         "hardened" if HARDENED else "soft")

    for j, (code, entry_point, steps) in enumerate(req["jobs"]):
        cand = Candidate(code, entry_point, memory_mb)
        try:
            arm(timeout)
            cand.start()
        except Deadline:
            cand.kill()
            cand.load_error = "the solution did not load within %gs" % timeout
        except SolutionDied as e:
            cand.load_error = str(e)
        except OSError as e:
            cand.load_error = "cannot start the solution: %s" % e
        finally:
            disarm()
        if cand.load_error:
            emit(j, -1, "error", cand.load_error)
        ns = {"__name__": "__tests__", "__builtins__": builtins, entry_point: cand}
        case = 0
        for kind, src, probe in steps:
            if kind == "setup":
                run_case(src, ns, timeout, None)
                continue
            if cand.load_error:
                status, message = "error", cand.load_error
            else:
                status, message = run_case(src, ns, timeout, probe)
            emit(j, case, status, message[:300])
            case += 1
        cand.kill()
    emit("done", "hardened" if HARDENED else "soft")

main()
"""

#: The harness program: common code, the worker's source as a constant, the harness.
HARNESS_SOURCE = COMMON + f"\nWORKER = {COMMON + _WORKER!r}\n" + _HARNESS
