#!/usr/bin/env python3
"""mpi_needs.py PROGRAM OUTPUT: which MPI library PROGRAM (an ELF linked
with MPI: gpupool-run-mpi, the Python package's _mpiproc) needs, by its
DT_NEEDED entries, written to OUTPUT as a C header (GP_MPI_LIB, the soname
to load, and GP_MPI_WHAT, it said for a user) or a Python module (MPI_WHAT),
by OUTPUT's suffix. The library is not bundled in the
wheel (it must be the machine's, matching its mpirun): what starts the
program says by this name what is missing where it is not installed."""

import re
import struct
import sys


def needed(path):
    """DT_NEEDED names of a 64- or 32-bit little- or big-endian ELF."""
    with open(path, "rb") as f:
        b = f.read()
    if b[:4] != b"\x7fELF":
        raise ValueError("%s: not an ELF file" % path)
    bits64, e = b[4] == 2, "<" if b[5] == 1 else ">"
    if bits64:
        phoff, phentsize, phnum = (struct.unpack_from(e + "Q", b, 32)[0],
                                   *struct.unpack_from(e + "HH", b, 54))
        ph, dyn = e + "IIQQQQQQ", e + "qQ"
    else:
        phoff, phentsize, phnum = (struct.unpack_from(e + "I", b, 28)[0],
                                   *struct.unpack_from(e + "HH", b, 42))
        ph, dyn = e + "IIIIIIII", e + "iI"
    loads, dynamic = [], None
    for i in range(phnum):
        h = struct.unpack_from(ph, b, phoff + i * phentsize)
        if bits64:
            ptype, off, vaddr, filesz = h[0], h[2], h[3], h[5]
        else:
            ptype, off, vaddr, filesz = h[0], h[1], h[2], h[4]
        if ptype == 1:
            loads.append((vaddr, off, filesz))
        elif ptype == 2:
            dynamic = (off, filesz)
    if dynamic is None:
        return []
    entries, strtab = [], None
    for i in range(0, dynamic[1], struct.calcsize(dyn)):
        tag, val = struct.unpack_from(dyn, b, dynamic[0] + i)
        if tag == 0:
            break
        if tag == 1:
            entries.append(val)
        elif tag == 5:
            strtab = val
    # DT_STRTAB is an address: the file offset is its PT_LOAD's.
    base = next(o + strtab - v for v, o, n in loads if v <= strtab < v + n)
    return [b[base + v:b.index(b"\0", base + v)].decode() for v in entries]


# Whose library a soname is, and how a Debian user gets it.
WHOSE = (("libmpi.so.40", "Open MPI's; Debian: apt-get install openmpi-bin"),
         ("libmpi.so.12", "MPICH's ABI, also Intel MPI's; Debian: apt-get "
          "install mpich"),
         ("libmpich.so.12", "MPICH's; Debian: apt-get install mpich"))


def main():
    prog, out = sys.argv[1], sys.argv[2]
    lib = next((n for n in needed(prog) if re.match(r"lib(mpi|mpich)\b", n)),
               "")
    what = "%s (%s)" % (lib, dict(WHOSE).get(lib, "an MPI library")) \
        if lib else ""
    with open(out, "w") as f:
        if out.endswith(".py"):
            f.write('"""The MPI library gpupool/_mpiproc needs (made by '
                    'src/cli/ranks/mpi_needs.py)."""\nMPI_WHAT = %r\n' % what)
        else:
            f.write("/* The MPI library gpupool-run-mpi needs (made by "
                    "mpi_needs.py). */\n#define GP_MPI_LIB \"%s\"\n"
                    "#define GP_MPI_WHAT \"%s\"\n" % (lib, what))


if __name__ == "__main__":
    main()
