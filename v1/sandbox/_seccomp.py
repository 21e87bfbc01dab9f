"""The local sandbox's system-call filter, built with libseccomp and given to `bwrap --seccomp FD`.

Everything is allowed except the calls a program never needs and that widen the
kernel's attack surface: keyrings, BPF, perf events, userfaultfd, io_uring,
kernel modules and kexec, mounts (old and new API), new namespaces (`unshare`,
`setns`, `clone` with a namespace flag), file handles, swap, reboot, port I/O,
the kernel log. They fail with EPERM (`clone3` with ENOSYS, so the C library falls back to `clone`, whose flags
the filter can see). The filter is compiled by the system's libseccomp
(`libseccomp.so.2`, Debian/Ubuntu `libseccomp2`) through ctypes: no hand-written
BPF, no Python dependency.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os

LIBRARY_HINT = "install it with `apt-get install -y libseccomp2` (Debian/Ubuntu) or `dnf install libseccomp` (Fedora)"
DENIED = (
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "unshare",
    "setns",
    "open_by_handle_at",
    "name_to_handle_at",
    "swapon",
    "swapoff",
    "reboot",
    "ioperm",
    "iopl",
    "syslog",
    "acct",
    "quotactl",
    "lookup_dcookie",
    "vhangup",
    "uselib",
    "vm86",
    "vm86old",
)
"""System calls that fail with EPERM inside a sandbox (those the running architecture lacks are skipped)."""
CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)
"""CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME: a `clone` with any fails with EPERM."""

_ALLOW = 0x7FFF0000
_CMP_MASKED_EQ = 7


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


class SeccompUnavailable(Exception):
    """libseccomp is missing or refused to build the filter; the message says which and how to fix it."""


@functools.cache
def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        raise SeccompUnavailable(
            f"the local sandbox backend needs libseccomp for its system-call filter; {LIBRARY_HINT}"
        ) from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def _add(lib: ctypes.CDLL, ctx: int, action: int, name: str, *comparisons: tuple[int, int, int, int]) -> None:
    number = lib.seccomp_syscall_resolve_name(name.encode())
    if number < 0:  # not a system call of this architecture
        return
    array = (_ArgCmp * len(comparisons))(*(_ArgCmp(*comparison) for comparison in comparisons))
    result = lib.seccomp_rule_add_array(ctx, action, number, len(comparisons), array if comparisons else None)
    if result != 0:
        raise SeccompUnavailable(f"libseccomp refused the filter's rule for {name}: {os.strerror(-result)}")


@functools.cache
def filter_program() -> bytes:
    """The compiled filter (a BPF program in the kernel's `sock_filter` layout), built once per process.

    Raises:
        SeccompUnavailable: libseccomp is not installed or could not build the filter.
    """
    lib = _library()
    ctx = lib.seccomp_init(_ALLOW)
    if not ctx:
        raise SeccompUnavailable("libseccomp could not start a filter (seccomp_init failed)")
    try:
        deny = _errno_action(errno.EPERM)
        for name in DENIED:
            _add(lib, ctx, deny, name)
        for flag in CLONE_NAMESPACE_FLAGS:
            _add(lib, ctx, deny, "clone", (0, _CMP_MASKED_EQ, flag, flag))
        _add(lib, ctx, _errno_action(errno.ENOSYS), "clone3")
        memfd = os.memfd_create("v1-seccomp", os.MFD_CLOEXEC)
        try:
            result = lib.seccomp_export_bpf(ctx, memfd)
            if result != 0:
                raise SeccompUnavailable(f"libseccomp could not export the filter: {os.strerror(-result)}")
            os.lseek(memfd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(memfd, 65536):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(memfd)
    finally:
        lib.seccomp_release(ctx)


def seccomp_problem() -> str | None:
    """Why the filter can't be built here (one line with the fix), or None when it can."""
    try:
        filter_program()
    except SeccompUnavailable as exc:
        return str(exc)
    return None


__all__ = ["DENIED", "LIBRARY_HINT", "SeccompUnavailable", "filter_program", "seccomp_problem"]
