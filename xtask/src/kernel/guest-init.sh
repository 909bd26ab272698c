#!/bin/sh
# PID 1 of the kernel-matrix guest (xtask/src/kernel/), run once the initramfs has mounted the
# host's root file system read-only over 9p. Mounts what xtrace and the tests need, moves the
# fixtures and the binary under test onto a tmpfs (a file on 9p is no file of a local file
# system), runs the smoke tests of plan.sh and powers the guest off. Everything it prints goes to
# the serial console, which xtask reads: `kmatrix: ...` lines are its own.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
HOME=/tmp
TMPDIR=/tmp
XTRACE_REQUIRE_BPF=1
RUST_BACKTRACE=1
export PATH HOME TMPDIR XTRACE_REQUIRE_BPF RUST_BACKTRACE

mount -t devtmpfs devtmpfs /dev
exec </dev/null >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
# A workspace under the host's /tmp (a clone made there) stays where it is under the guest's
# tmpfs /tmp: the host's /tmp is kept reachable, and the workspace's top directory bound back.
mkdir -p /dev/shm/host-tmp
mount --bind /tmp /dev/shm/host-tmp
mount -t tmpfs tmpfs /tmp
case "${kmatrix_dir:-}" in
/tmp/?*)
    top=${kmatrix_dir#/tmp/}
    top=/tmp/${top%%/*}
    mkdir -p "$top"
    mount --bind "/dev/shm/host-tmp/${top#/tmp/}" "$top"
    ;;
esac
mount -t tmpfs tmpfs /run
mount -t bpf bpf /sys/fs/bpf
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null

power_off() {
    echo "kmatrix: done"
    sync
    echo o >/proc/sysrq-trigger
    sleep 30
}
fail() {
    echo "kmatrix: error: $*"
    power_off
}

# Same paths, local files: a copy on the tmpfs mounted over the host's. The fixtures' rpaths and
# the tests' paths stay as they were built.
onto_tmpfs() {
    copy=/tmp/kmatrix-local/$(echo "$1" | tr / _)
    if [ -d "$1" ]; then
        mkdir -p "$copy" && find "$1" -maxdepth 1 -type f -exec cp -a {} "$copy/" \;
    else
        cp -a "$1" "$copy"
    fi || fail "copying $1 to the tmpfs"
    mount --bind "$copy" "$1" || fail "mounting the copy of $1"
}
mkdir -p /tmp/kmatrix-local

[ -r /sys/kernel/btf/vmlinux ] || fail "the kernel has no BTF (/sys/kernel/btf/vmlinux)"
echo "kmatrix: kernel $(uname -r)"
# Whether the kernel took guest.rs's proc_mem.force_override=never (a kernel without it drops the
# parameter unsaid): a write of a byte over itself, through /proc/self/mem, into Python's code.
if python3 - <<'PY'
import errno, sys
with open("/proc/self/maps") as maps:
    start = next(int(l.split("-")[0], 16) for l in maps if l.split()[1] == "r-xp")
with open("/proc/self/mem", "r+b", buffering=0) as mem:
    mem.seek(start)
    byte = mem.read(1)
    mem.seek(start)
    try:
        mem.write(byte)
    except OSError as e:
        sys.exit(0 if e.errno == errno.EIO else 1)
sys.exit(1)
PY
then
    echo "kmatrix: writes through /proc/PID/mem into read-only memory: refused (proc_mem.force_override=never)"
else
    echo "kmatrix: writes through /proc/PID/mem into read-only memory: allowed (this kernel has no proc_mem.force_override)"
fi

# run FILE BINARY TEST...: one test binary, the tests named exactly, on one thread.
run() {
    file=$1 binary=$2
    shift 2
    echo "kmatrix: begin $file"
    (cd /tmp && "$binary" --exact --test-threads=1 --color never "$@")
    echo "kmatrix: end $file $?"
}

[ -n "${kmatrix_dir:-}" ] || fail "kmatrix_dir is not set on the kernel command line"
[ -r "$kmatrix_dir/plan.sh" ] || fail "no plan at $kmatrix_dir/plan.sh"
. "$kmatrix_dir/plan.sh"
power_off
