//! Names the tool library keeps for the life of its process (`xtrace_common::ranges::INTERNED`):
//! a hit passes a kept name's address tagged, and the kernel program reads the string only on the
//! name's first use (`INTERNED_FIRST`). xtrace learns each name from that first hit; a name kept
//! before xtrace attached is read once from the process's memory (`/proc/PID/mem`).
use std::collections::HashMap;

use xtrace_common::{
    event::ARG_STR_LEN,
    ranges::{ADDRESS, INTERNED, INTERNED_FIRST},
};

use crate::{model::text::c_text, procfs::process_text};

#[derive(Debug, Default)]
pub struct KeptNames {
    /// Names by (pid, address of the kept copy); at most `INTERN_LIMIT` per process. A process
    /// started later under a reused pid (or an exec) keeps its names while xtrace is attached, so
    /// their first uses replace what was known at those addresses.
    known: HashMap<(u32, u64), String>,
}

impl KeptNames {
    /// The text of string argument `value` of a hit in process `pid`, whose kernel program read
    /// `read` (empty when it read nothing); None for a null pointer.
    pub fn text(&mut self, pid: u32, value: u64, read: &[u8]) -> Option<String> {
        let address = value & ADDRESS;
        if address == 0 {
            return None;
        }
        if value & INTERNED != 0 {
            let text = self
                .known
                .entry((pid, address))
                .or_insert_with(|| read_process(pid, address));
            return Some(text.clone());
        }
        if value & INTERNED_FIRST != 0 {
            // Kept from now on; a copy at an address seen before belongs to a new program image
            // (after an exec), so it replaces what was known there.
            let text = match read {
                [] => read_process(pid, address),
                _ => c_text(read),
            };
            self.known.insert((pid, address), text.clone());
            return Some(text);
        }
        Some(c_text(read))
    }
}

/// The name of a range whose kept name could not be read (its process exited before xtrace
/// read it).
pub const UNREADABLE: &str = "(unreadable)";

/// The string at `address` in process `pid`, as much as the kernel program would read (up to the
/// end of the mapping); [`UNREADABLE`] when the process or the address is gone.
fn read_process(pid: u32, address: u64) -> String {
    process_text(pid, address, ARG_STR_LEN - 1).unwrap_or_else(|| UNREADABLE.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A NUL-terminated string in this process, and the argument the tool library would pass.
    fn kept(text: &str, tag: u64) -> (std::ffi::CString, u64) {
        let s = std::ffi::CString::new(text).unwrap();
        let value = s.as_ptr() as u64 | tag;
        (s, value)
    }

    #[test]
    fn first_use_is_remembered_for_later_uses() {
        let mut names = KeptNames::default();
        let pid = 4242;
        let value = 0x5000_1000;
        assert_eq!(
            names.text(pid, value | INTERNED_FIRST, b"step\0"),
            Some("step".into())
        );
        // Later hits read nothing: no process 4242 is needed.
        assert_eq!(names.text(pid, value | INTERNED, b""), Some("step".into()));
        assert_eq!(names.text(pid, 0, b""), None);
        // An untagged argument is what was read.
        assert_eq!(names.text(pid, 0x7000, b"load\0"), Some("load".into()));
    }

    #[test]
    fn a_name_kept_before_attach_is_read_from_the_process() {
        let mut names = KeptNames::default();
        let (_s, value) = kept("kept earlier", INTERNED);
        assert_eq!(
            names.text(std::process::id(), value, b""),
            Some("kept earlier".into())
        );
        let (_long, value) = kept(&"y".repeat(80), INTERNED);
        assert_eq!(names.text(std::process::id(), value, b""), Some("y".repeat(63)));
    }

    #[test]
    fn a_kept_name_that_cannot_be_read_says_so() {
        let mut names = KeptNames::default();
        // Page 0 is never mapped.
        assert_eq!(
            names.text(std::process::id(), 0x10 | INTERNED, b""),
            Some(UNREADABLE.into())
        );
    }

    #[test]
    fn a_first_use_after_an_exec_replaces_the_old_name() {
        let mut names = KeptNames::default();
        names.text(7, 0x9000 | INTERNED_FIRST, b"old\0");
        names.text(7, 0x9000 | INTERNED_FIRST, b"new\0");
        assert_eq!(names.text(7, 0x9000 | INTERNED, b""), Some("new".into()));
    }
}
