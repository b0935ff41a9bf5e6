"""Items that cross the ranks through the rings (gpupool/_link.py: 64 KiB
or more), for the scripts here: big(i, pad) is item i, index() gives i
back."""


def big(i, pad):
    return i.to_bytes(4, "little") + bytes(pad)


def index(b):
    return int.from_bytes(bytes(b[:4]), "little")
