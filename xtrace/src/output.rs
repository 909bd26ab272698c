//! The output directory: its default name, creating it, and creating files in it without following
//! symbolic links.
use std::{
    fs::File,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

use crate::error::{Error, Result};

/// `xtrace-YYYYmmdd-HHMMSS` in local time.
pub fn default_dir() -> PathBuf {
    // SAFETY: time(NULL) and localtime_r with valid pointers.
    let tm = unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&now, &mut tm);
        tm
    };
    PathBuf::from(format!(
        "xtrace-{:04}{:02}{:02}-{:02}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    ))
}

/// Creates `dir` (and parents) if needed.
pub fn prepare(dir: Option<&Path>) -> Result<PathBuf> {
    let dir = dir.map(Path::to_path_buf).unwrap_or_else(default_dir);
    let err = |source| Error::Output {
        path: dir.clone(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(err)?;
    Ok(dir)
}

/// Creates (truncates) `dir/name`; a symbolic link there is refused, not followed.
pub fn create(dir: &Path, name: &str) -> Result<File> {
    let path = dir.join(name);
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(&path)
        .map_err(|source| Error::Output { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_name_shape() {
        let name = default_dir().display().to_string();
        assert_eq!(name.len(), "xtrace-20260101-120000".len(), "{name}");
        assert!(name.starts_with("xtrace-20"));
    }

    #[test]
    fn refuses_symlinks() {
        let dir = std::env::temp_dir().join(format!("xtrace-out-test-{}", std::process::id()));
        let dir = prepare(Some(&dir)).unwrap();
        std::os::unix::fs::symlink("/tmp/xtrace-out-test-elsewhere", dir.join("trace.json")).unwrap();
        assert!(matches!(create(&dir, "trace.json"), Err(Error::Output { .. })));
        assert!(create(&dir, "summary.json").is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
