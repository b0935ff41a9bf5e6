"""machine.py: the machine, the versions of what is measured, the git
revision and the build."""
import json
import os
import platform
import shutil
import subprocess

from common import MIB, REPO, first_line, log, sh
from supervise import read_kb


def machine_info():
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    distro = None
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    distro = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    mem = read_kb("/proc/meminfo", "MemTotal:")
    virt = first_line(sh(["systemd-detect-virt"]))
    return {"cpu": cpu, "cores": os.cpu_count(),
            "cpus_allowed": len(os.sched_getaffinity(0)),
            "kernel": platform.release(), "distro": distro,
            "mem_gib": round(mem / MIB, 1) if mem else None,
            "virt": virt if virt and virt != "none" else None,
            "hostname": platform.node()}


def versions(build, runners):
    v = {"python": platform.python_version(),
         "glibc": os.confstr("CS_GNU_LIBC_VERSION")}
    gpr = os.path.join(build, "src", "cli", "gpupool-run")
    v["gpupool"] = first_line(sh([gpr, "--version"])) if \
        os.access(gpr, os.X_OK) else None
    if v["gpupool"] is None:
        try:
            with open(os.path.join(REPO, "include", "gpupool.h")) as f:
                for line in f:
                    if "#define GP_VERSION" in line:
                        v["gpupool"] = "libgpupool " + line.split()[2]
        except OSError:
            pass
    v["gcc"] = first_line(sh(["gcc", "--version"]))
    v["meson"] = first_line(sh(["meson", "--version"]))
    v["xargs"] = first_line(sh(["xargs", "--version"]))
    v["parallel"] = first_line(sh(["parallel", "--version"])) if \
        shutil.which("parallel") else None
    v["tsp"] = first_line(sh(["tsp", "-V"])) if shutil.which("tsp") else None
    v["dash"] = None
    dpkg = sh(["dpkg-query", "-W", "-f", "${Version}", "dash"])
    if dpkg and "no packages" not in dpkg:
        v["dash"] = "dash " + dpkg
    return v


def git_info():
    rev = first_line(sh(["git", "-C", REPO, "rev-parse", "HEAD"]))
    st = sh(["git", "-C", REPO, "status", "--porcelain"])
    return {"revision": rev,
            "describe": first_line(sh(["git", "-C", REPO, "log", "-1",
                                       "--format=%h %s"])),
            "dirty_paths": len(st.splitlines()) if st else 0}


def build_info(build):
    bt = None
    try:
        with open(os.path.join(build, "meson-info",
                               "intro-buildoptions.json")) as f:
            for o in json.load(f):
                if o.get("name") == "buildtype":
                    bt = o.get("value")
    except (OSError, ValueError):
        pass
    return {"dir": build, "buildtype": bt}


def do_build(build):
    if not os.path.exists(os.path.join(build, "build.ninja")):
        log("meson setup %s (release)" % build)
        subprocess.run(["meson", "setup", build, REPO,
                        "-Dbuildtype=release"], check=True,
                       stdout=subprocess.DEVNULL)
    targets_ = ["bench/bench_pool", "bench/spawn4", "bench/stamp",
                "bench/bench_claim"]
    r = subprocess.run(["ninja", "-C", build] + targets_ +
                       ["src/cli/gpupool-run"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        log("ninja: gpupool-run did not build; building the rest")
        subprocess.run(["ninja", "-C", build] + targets_, check=True,
                       stdout=subprocess.DEVNULL)
    # Only in a build with MPI.
    subprocess.run(["ninja", "-C", build, "bench/bench_ranks"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
