# sandboxd: python's bootstrap of a pre-started interpreter (the execution
# pool: docs/pool.md "Execution guests", docs/receipts.md). The launcher
# runs `python3 /usr/lib/sandboxd/runtimes/wait.py "$d"` in the directory
# it made with the FIFOs `ready` and `go`. The cold path has no bootstrap:
# `python3 "$d/main.py"`.
#
# It writes its pid to `ready`, blocks in the open of `go` until the host's
# delivery wakes it, removes both, and exits 125 (as the cold launcher
# does) when main.py is not there (the upload failed). Then the code runs
# in __main__ with what `python3 main.py` sets (__file__, __cached__,
# __loader__, sys.argv, sys.path[0], sys.orig_argv), compiled from the
# file like a script; an uncaught exception prints through sys.excepthook
# without the bootstrap's frame. It imports nothing a cold start does not
# (sys and os, loaded by every start-up). No docstring: __main__.__doc__
# stays None, as for a script without one.
def _sbx(d):
    import sys, os
    f = d + "/main.py"
    w = os.open(d + "/ready", os.O_WRONLY)
    os.write(w, str(os.getpid()).encode())
    os.close(w)
    os.close(os.open(d + "/go", os.O_WRONLY))
    os.unlink(d + "/ready")
    os.unlink(d + "/go")
    try:
        with open(f, "rb") as p:
            c = p.read()
    except OSError:
        os._exit(125)
    g = sys.modules["__main__"].__dict__
    del g["_sbx"]
    g["__file__"] = f
    g["__cached__"] = None
    g["__loader__"] = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", f)
    sys.argv[:] = [f]
    sys.path[0] = d
    sys.orig_argv[:] = [sys.orig_argv[0], f]
    try:
        exec(compile(c, f, "exec", dont_inherit=True), g)
    except SystemExit:
        raise
    except BaseException as e:
        t = e.__traceback__.tb_next
        e.__traceback__ = t
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, t
        sys.excepthook(type(e), e, t)
        sys.exit(1)


_sbx(__import__("sys").argv[1])
