#!/usr/bin/env python3
"""check-manpage.py: keep docs/gpupool.3 true to the code (meson test).

usage: check-manpage.py gpupool.3 gpupool.h squares.c [groff]

Fails when
  - a function that gpupool.h exports (GP_API) is missing from the man
    page's NAME or SYNOPSIS, or a struct or enum of the header from its
    SYNOPSIS;
  - the program in its EXAMPLE section differs from examples/squares.c
    (whitespace aside), so the page shows code that is built and tested;
  - groff, when given, warns about the page (groff -man -ww).
"""
import re
import subprocess
import sys


def section(page, name):
    m = re.search(r'^\.SH ' + name + r'\n(.*?)(?=^\.SH )', page, re.M | re.S)
    return m.group(1) if m else ''


def unroff(text):
    text = re.sub(r'\\f[BIRP]', '', text)
    text = text.replace('\\e', '\\').replace('\\-', '-').replace('\\&', '')
    return text


def words(text):
    return re.findall(r'\S+', text)


def main():
    if len(sys.argv) not in (4, 5):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    page = open(sys.argv[1], encoding='utf-8').read()
    header = open(sys.argv[2], encoding='utf-8').read()
    example = open(sys.argv[3], encoding='utf-8').read()
    bad = []

    name, synopsis = section(page, 'NAME'), section(page, 'SYNOPSIS')
    for fn in re.findall(r'^GP_API\s[^(;]*?\b(\w+)\(', header, re.M):
        if not re.search(r'\b' + fn + r'\b', name):
            bad.append('NAME lacks ' + fn)
        if not re.search(r'\b' + fn + r'\(', synopsis):
            bad.append('SYNOPSIS lacks ' + fn + '()')
    for kind, tag in re.findall(r'^(struct|enum) (\w+) \{', header, re.M):
        if not re.search(kind + r'\s+' + tag + r'\s*\{', synopsis):
            bad.append('SYNOPSIS lacks %s %s' % (kind, tag))
    for td in re.findall(r'^typedef \w+ (\w+)\(', header, re.M):
        if td not in synopsis:
            bad.append('SYNOPSIS lacks typedef ' + td)

    m = re.search(r'^\.SS Program source\n\.EX\n(.*?)^\.EE', page,
                  re.M | re.S)
    want = example[example.find('#include'):]
    if m is None:
        bad.append('EXAMPLE has no program source')
    elif words(unroff(m.group(1))) != words(want):
        bad.append('EXAMPLE program differs from ' + sys.argv[3])

    if len(sys.argv) == 5:
        r = subprocess.run([sys.argv[4], '-man', '-Tutf8', '-ww', '-z',
                            sys.argv[1]], capture_output=True, text=True)
        if r.returncode != 0 or r.stderr.strip():
            bad.append('groff: ' + (r.stderr.strip() or
                                    'exit status %d' % r.returncode))

    for b in bad:
        print('check-manpage.py: ' + b, file=sys.stderr)
    if not bad:
        print('gpupool.3: API complete, example matches, %s' %
              ('no groff warnings' if len(sys.argv) == 5 else
               'groff not checked (not found)'))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
