//! A file named with `-o FILE` (`xtrace report`, `diff`, `flamegraph --diff`): written whole as
//! `FILE.partial` and renamed, as the recording's files are; `-` is standard output, and a device
//! or FIFO (`/dev/null`, a terminal, `/dev/stdout`'s target) is written to, never replaced.
use std::{io::Write, path::Path};

use super::{invoking_user, write, Dir};
use crate::error::{Error, Result};

/// How messages name `path`: `standard output` for `-`.
pub fn shown(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "standard output".into()
    } else {
        path.display().to_string()
    }
}

/// Writes `bytes` as the file `path` (a file name, with or without a directory). A symbolic link
/// is followed only to a device or FIFO; one to a file, a block device, a socket or a name ending
/// in `/` is refused.
pub fn write_path(path: &Path, bytes: &[u8]) -> Result<()> {
    let failed = |source| Error::OutputFile {
        path: path.to_path_buf(),
        source,
    };
    let refused = |why: &str| failed(std::io::Error::other(why.to_string()));
    // A reader that went away (`-o - | head`) is no error, as for standard output without -o.
    let gone_is_done = |written: std::io::Result<()>| match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        written => written,
    };
    if path.as_os_str() == "-" {
        if super::stdio::stdout_closed() {
            return Err(failed(std::io::Error::other(super::stdio::CLOSED)));
        }
        let mut out = std::io::stdout().lock();
        return gone_is_done(out.write_all(bytes).and_then(|()| out.flush())).map_err(failed);
    }
    if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        return Err(refused("a file name cannot end in '/'"));
    }
    if let Ok(found) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        let target = std::fs::metadata(path).map(|m| m.file_type());
        let kind = found.file_type();
        let through = |t: &std::fs::FileType| t.is_char_device() || t.is_fifo();
        if kind.is_symlink() && !target.as_ref().is_ok_and(through) {
            return Err(refused("it is a symbolic link, which xtrace does not follow"));
        }
        if target.as_ref().is_ok_and(through) {
            // Opened as it is, without creating or truncating: what is there stays.
            let written = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|mut f| f.write_all(bytes));
            return gone_is_done(written).map_err(failed);
        }
        if kind.is_block_device() || kind.is_socket() {
            return Err(refused("it is not a regular file"));
        }
    }
    // The advice of a recording's output directory does not fit a file named with -o.
    let as_file = |e| match e {
        Error::Output { path, source } => Error::OutputFile { path, source },
        e => e,
    };
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            // Of commands without -q.
            let dir = Dir::open(dir, invoking_user(false)).map_err(failed)?;
            write(&dir, &name.to_string_lossy(), bytes).map_err(as_file)
        }
        _ => Err(Error::Usage(format!(
            "-o {}: give the path of a file to write",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("xtrace-named-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn devices_and_fifos_are_written_to_not_replaced() {
        use std::os::unix::fs::FileTypeExt;
        let dir = scratch("devices");
        write_path(Path::new("/dev/null"), b"x").unwrap();
        assert!(std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
        let link = dir.join("null");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        write_path(&link, b"x").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        let full = write_path(Path::new("/dev/full"), b"x").unwrap_err().to_string();
        assert!(
            full.starts_with("cannot write /dev/full: No space left"),
            "{full}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn links_to_files_and_names_ending_in_a_slash_are_refused() {
        let dir = scratch("links");
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = dir.join("out");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let message = write_path(&link, b"x").unwrap_err().to_string();
        assert!(
            message.contains("out: it is a symbolic link, which xtrace does not follow"),
            "{message}"
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        let slash = dir.join("new/");
        let message = write_path(&slash, b"x").unwrap_err().to_string();
        assert!(message.contains("a file name cannot end in '/'"), "{message}");
        assert!(!dir.join("new").exists());
        write_path(&dir.join("plain"), b"whole").unwrap();
        assert_eq!(std::fs::read(dir.join("plain")).unwrap(), b"whole");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
