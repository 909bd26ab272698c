//! Where CPython's GIL lies in a process: the main interpreter's `struct _gil_runtime_state`,
//! at an offset in `_PyRuntime` per minor version (3.10 and 3.11: `_PyRuntime.ceval.gil`; 3.12
//! and 3.13: `_PyRuntime._main_interpreter._gil`), with the four futex-bearing fields its waits
//! sleep on. The offsets were printed by a C program compiled against each version's internal
//! headers (docs/internals/python.md, "How each layout was checked").
use crate::procfs::Mapping;

/// `offsetof` of the GIL's fields in `struct _gil_runtime_state`, the same in 3.10 to 3.13
/// (x86-64, glibc: a `pthread_cond_t` is 48 bytes, a `pthread_mutex_t` 40), with the name a lock
/// on each is given: `take_gil` waits on `cond` (the GIL itself) and `mutex`; `drop_gil` waits on
/// `switch_cond` (a forced switch: until another thread took the GIL) and `switch_mutex`.
const PARTS: [(u64, u64, &str); 4] = [
    (32, 48, "GIL"),
    (80, 40, "GIL.mutex"),
    (120, 48, "GIL.switch_cond"),
    (168, 40, "GIL.switch_mutex"),
];

/// The offset of the main interpreter's GIL in `_PyRuntime` in CPython 3.`minor`, for the
/// versions with one here.
fn offset(minor: u32) -> Option<u64> {
    match minor {
        10 => Some(352),
        11 => Some(360),
        12 => Some(77_432),
        13 => Some(96_104),
        _ => None,
    }
}

/// A process's GIL: the address of its `struct _gil_runtime_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gil {
    pub start: u64,
}

impl Gil {
    /// The GIL of process `pid` with `maps` mapped: None when it maps no CPython, or one of a
    /// version without an offset here, or a free-threaded build (`3.13t`, another layout).
    pub fn of(pid: u32, maps: &[Mapping]) -> Option<Gil> {
        let interpreter = super::detect::find(pid, maps)?.ok()?;
        let name = crate::elf::symbolize::module_name(&interpreter.path);
        if name.contains(&format!("3.{}t", interpreter.minor)) {
            return None;
        }
        Gil::at(interpreter.runtime, interpreter.minor)
    }

    /// The GIL of CPython 3.`minor` whose `_PyRuntime` is at `runtime`.
    pub fn at(runtime: u64, minor: u32) -> Option<Gil> {
        offset(minor).map(|offset| Gil {
            start: runtime + offset,
        })
    }

    /// The part of the GIL holding futex word `address`: its name and its start, which stands for
    /// the lock (a condition variable's waiters sleep on either of two words in it).
    pub fn part(&self, address: u64) -> Option<(&'static str, u64)> {
        let within = address.checked_sub(self.start)?;
        PARTS
            .iter()
            .find(|&&(at, size, _)| within >= at && within < at + size)
            .map(|&(at, _, name)| (name, self.start + at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian's python3.11 waits on `_PyRuntime+0x1b0` and `+0x1b4` (the condition variable's
    /// two futex words), `+0x1b8` (the mutex), `+0x208`, `+0x20c` (switch_cond) and `+0x210`
    /// (switch_mutex): as seen in its futex waits.
    #[test]
    fn the_gil_fields_of_3_11_are_where_its_waits_sleep() {
        let gil = Gil::at(0x1000, 11).unwrap();
        assert_eq!(gil.part(0x11b0), Some(("GIL", 0x1188)));
        assert_eq!(gil.part(0x11b4), Some(("GIL", 0x1188)));
        assert_eq!(gil.part(0x11b8), Some(("GIL.mutex", 0x11b8)));
        assert_eq!(gil.part(0x1208), Some(("GIL.switch_cond", 0x11e0)));
        assert_eq!(gil.part(0x120c), Some(("GIL.switch_cond", 0x11e0)));
        assert_eq!(gil.part(0x1210), Some(("GIL.switch_mutex", 0x1210)));
        assert_eq!(gil.part(0x1168), None, "interval, last_holder, locked: no lock");
        assert_eq!(gil.part(0x1238), None, "past the GIL");
        assert_eq!(gil.part(0x100), None);
    }

    #[test]
    fn versions_without_an_offset_have_no_gil() {
        assert_eq!(Gil::at(0x1000, 9), None);
        assert_eq!(Gil::at(0x1000, 14), None);
        assert_eq!(
            Gil::at(0x1000, 12).unwrap().part(0x1000 + 77_432 + 40),
            Some(("GIL", 0x1000 + 77_432 + 32))
        );
    }
}
