"""pmap(): what test_core.py and test_buffers.py ask of the extension's
Pool, items in and (status, code, out) out, in item order, through
Pool.run(): the one call the package itself uses (the extension has no
map of its own)."""


def pmap(p, items):
    items = list(items)
    res = [None] * len(items)
    it = iter(enumerate(items))

    def done(k, status, code, out):
        res[k] = (status, code, out)

    p.run(lambda: next(it, None), done)
    return res
