//! String arguments the kernel program could not read. Its read cannot fault in a page the process
//! has not touched yet: a string literal in `.rodata` that the function reads only after its entry
//! probe fired is unreadable at its first call. Where the address lies in a read-only file mapping
//! (the executable's or a library's data or code), its bytes are the file's, and they are read
//! from the file instead ([`crate::procfs::mapped_string`]); a null pointer stays `null`, and so
//! does a string no route could read, which is counted (summary.json's `unreadable_strings`).
use std::borrow::Cow;

use crate::{image::Images, procfs::mapped_string};

/// The string arguments of records: as read by the kernel, or else from a mapped file.
#[derive(Debug, Default)]
pub struct Strings {
    /// Strings at a non-null address that no route could read.
    unreadable: u64,
}

impl Strings {
    /// The bytes of the string at `address` of process `pid`, at most `max` of them: `read` (what
    /// the kernel read, its NUL included) when it read any, else those of the read-only file
    /// mapping there; empty (`null`) for a null pointer or when unreadable.
    pub fn resolve<'a>(
        &mut self,
        images: &mut Images,
        (pid, address): (u32, u64),
        read: &'a [u8],
        max: usize,
    ) -> Cow<'a, [u8]> {
        if !read.is_empty() || address == 0 {
            return Cow::Borrowed(read);
        }
        let bytes = images
            .readable
            .at(pid, address)
            .and_then(|mapping| mapped_string(pid, &mapping, address, max));
        match bytes {
            Some(bytes) => Cow::Owned(bytes),
            None => {
                self.unreadable += 1;
                Cow::Borrowed(read)
            }
        }
    }

    /// Strings at a non-null address that no route could read.
    pub fn unreadable(&self) -> u64 {
        self.unreadable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unread_string_is_read_from_its_mapped_file_else_counted() {
        let path = std::env::temp_dir().join(format!("xtrace-strings-{}", std::process::id()));
        std::fs::write(&path, b"\0\0\0\0cold literal\0").unwrap();
        let pid = u32::MAX;
        let mut images = Images::default();
        images.readable.insert(
            pid,
            vec![crate::procfs::Mapping {
                start: 0x10000,
                end: 0x11000,
                offset: 0,
                path: path.to_str().unwrap().into(),
                deleted: false,
                file: None,
            }],
        );
        let mut strings = Strings::default();
        assert_eq!(
            &*strings.resolve(&mut images, (pid, 0x10004), b"hot\0", 63),
            b"hot\0",
            "read by the kernel"
        );
        assert_eq!(
            &*strings.resolve(&mut images, (pid, 0x10004), b"", 63),
            b"cold literal\0"
        );
        assert_eq!(&*strings.resolve(&mut images, (pid, 0x10004), b"", 4), b"cold\0");
        assert_eq!(
            &*strings.resolve(&mut images, (pid, 0), b"", 63),
            b"",
            "a null pointer"
        );
        assert_eq!(strings.unreadable(), 0);
        assert_eq!(
            &*strings.resolve(&mut images, (pid, 0x20000), b"", 63),
            b"",
            "in no mapping"
        );
        assert_eq!(strings.unreadable(), 1);
        std::fs::remove_file(&path).unwrap();
    }
}
