//! An output directory held by a file descriptor. Once xtrace has opened it, every file it creates,
//! renames or removes there is named relative to that descriptor (`openat`, `renameat`,
//! `unlinkat`), so swapping the directory, or one of its parents, for a symbolic link while xtrace
//! runs cannot send a file anywhere else. The path the user gave is followed once, when the
//! directory is opened; the directories xtrace creates are entered without following links and,
//! under sudo, handed to the invoking user by descriptor.
use std::{
    ffi::{CString, OsStr},
    fs::File,
    io,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::{Path, PathBuf},
};

/// What a name in the directory is, its links not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Directory,
    Symlink,
    Other,
}

/// An open output directory, the path it was opened by (for messages), and who is given what is
/// created in it.
#[derive(Debug)]
pub struct Dir {
    path: PathBuf,
    fd: OwnedFd,
    /// (uid, gid) each file and directory xtrace creates is handed to (the user who ran sudo).
    owner: Option<(u32, u32)>,
    /// Whether xtrace made the directory itself: then it is removed when dropped empty (a
    /// recording that failed before writing anything leaves no trace of itself).
    created: bool,
}

impl Drop for Dir {
    fn drop(&mut self) {
        if self.created {
            // Fails, leaving it, unless it is still empty.
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}

impl Dir {
    /// Opens the existing directory `path`; files created in it are handed to `owner` when given.
    pub fn open(path: &Path, owner: Option<(u32, u32)>) -> io::Result<Dir> {
        Ok(Dir {
            path: path.to_path_buf(),
            fd: open_at(libc::AT_FDCWD, path.as_os_str(), false)?,
            owner,
            created: false,
        })
    }

    /// Opens `path`, first creating it and its missing parents, outermost first; each directory
    /// it creates, and each file created in it, is handed to `owner` when given.
    pub fn open_or_create(path: &Path, owner: Option<(u32, u32)>) -> io::Result<Dir> {
        let (fd, created) = open_or_create(path, owner)?;
        Ok(Dir {
            path: path.to_path_buf(),
            fd,
            owner,
            created,
        })
    }

    /// Creates a new directory `parent/base`, or `parent/base-2`, `-3`, ... up to `-99` where a
    /// name is taken (by anything: a directory of an earlier run in the same second, a symbolic
    /// link planted for the name), and opens it without following a link; under sudo it is
    /// handed to `owner`. For a name xtrace picks itself: nothing that was there before is
    /// entered, followed or written into. A directory swapped in between its creation and its
    /// opening is refused by its owner.
    pub fn create_fresh(parent: &Path, base: &str, owner: Option<(u32, u32)>) -> io::Result<Dir> {
        let at = open_at(libc::AT_FDCWD, parent.as_os_str(), false)?;
        for n in 1..100 {
            let name = if n == 1 {
                base.to_owned()
            } else {
                format!("{base}-{n}")
            };
            let c = c_name(OsStr::new(&name))?;
            // SAFETY: a live directory descriptor and a NUL-terminated name.
            match checked(unsafe { libc::mkdirat(at.as_raw_fd(), c.as_ptr(), 0o777) }) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
            let fd = open_at(at.as_raw_fd(), OsStr::new(&name), true)?;
            // Another user can swap it only in a directory others may write to without the
            // sticky bit (elsewhere, a file system that shows one owner for all, such as a vfat
            // or CIFS mount, would fail this for nothing).
            let uid = |fd: &OwnedFd| -> io::Result<u32> {
                Ok(std::os::unix::fs::MetadataExt::uid(
                    &File::from(fd.try_clone()?).metadata()?,
                ))
            };
            let parent_mode = std::os::unix::fs::MetadataExt::mode(&File::from(at.try_clone()?).metadata()?);
            let open_to_others = parent_mode & 0o022 != 0 && parent_mode & libc::S_ISVTX == 0;
            // SAFETY: geteuid has no preconditions.
            if open_to_others && uid(&fd)? != unsafe { libc::geteuid() } {
                return Err(io::Error::other(format!(
                    "{name} was replaced by another user's directory as it was created"
                )));
            }
            if let Some(owner) = owner {
                hand_over(&at, &c, &fd, owner)?;
            }
            let path = if parent == Path::new(".") {
                PathBuf::from(&name)
            } else {
                parent.join(&name)
            };
            return Ok(Dir {
                path,
                fd,
                owner,
                created: true,
            });
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{base} and {base}-2 to {base}-99 are all taken"),
        ))
    }

    /// Who each file and directory made in it is handed to, under sudo.
    pub fn owner(&self) -> Option<(u32, u32)> {
        self.owner
    }

    /// The path the directory was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` in the directory, as a path for messages.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The directory as a path for code that opens files by path: `/proc/self/fd/N`, which names
    /// the open directory itself, wherever it is now.
    pub fn by_descriptor(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// Creates the new file `name` (mode 0644 before the umask), failing if anything is there
    /// (`O_EXCL`: a symbolic link is never followed, a hard link never written through). It is
    /// handed to the directory's owner by its descriptor (no path is looked up again).
    pub fn create_file(&self, name: &str) -> io::Result<File> {
        let name = c_name(OsStr::new(name))?;
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a live directory descriptor and a NUL-terminated name.
        let fd = unsafe { libc::openat(self.fd.as_raw_fd(), name.as_ptr(), flags, 0o644 as libc::c_uint) };
        // SAFETY: a descriptor openat just returned, owned by nothing else.
        let file = checked(fd).map(|fd| File::from(unsafe { OwnedFd::from_raw_fd(fd) }))?;
        if let Some((uid, gid)) = self.owner {
            if let Err(e) = std::os::unix::fs::fchown(&file, Some(uid), Some(gid)) {
                // Not left behind as root's (root without CAP_CHOWN).
                // SAFETY: a live directory descriptor and a NUL-terminated name.
                unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) };
                return Err(e);
            }
        }
        Ok(file)
    }

    /// Removes file `name` (not a directory).
    pub fn remove_file(&self, name: &str) -> io::Result<()> {
        let name = c_name(OsStr::new(name))?;
        // SAFETY: a live directory descriptor and a NUL-terminated name.
        checked(unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) }).map(drop)
    }

    /// Renames `from` to `to`, replacing (not following) what `to` names.
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (c_name(OsStr::new(from))?, c_name(OsStr::new(to))?);
        let fd = self.fd.as_raw_fd();
        // SAFETY: a live directory descriptor and NUL-terminated names.
        checked(unsafe { libc::renameat(fd, from.as_ptr(), fd, to.as_ptr()) }).map(drop)
    }

    /// What `name` is, or None when there is nothing by that name.
    pub fn kind(&self, name: &str) -> io::Result<Option<Kind>> {
        let name = c_name(OsStr::new(name))?;
        // SAFETY: stat is plain data; fstatat fills it or fails.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a live directory descriptor, a NUL-terminated name and a stat to fill.
        let rc = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                &mut stat,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        match checked(rc) {
            Ok(_) => Ok(Some(match stat.st_mode & libc::S_IFMT {
                libc::S_IFREG => Kind::File,
                libc::S_IFDIR => Kind::Directory,
                libc::S_IFLNK => Kind::Symlink,
                _ => Kind::Other,
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Opens the directory `path` if it exists; else opens (creating) its parent, creates it there
/// and enters it without following a link, so nothing swapped in meanwhile is entered.
/// [`Dir::open_or_create`]'s descriptor, and whether the last directory was made here.
fn open_or_create(path: &Path, owner: Option<(u32, u32)>) -> io::Result<(OwnedFd, bool)> {
    match open_at(libc::AT_FDCWD, path.as_os_str(), false) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        found => return found.map(|fd| (fd, false)),
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let (parent, _) = open_or_create(parent, owner)?;
    let c = c_name(name)?;
    // SAFETY: a live directory descriptor and a NUL-terminated name.
    let created = match checked(unsafe { libc::mkdirat(parent.as_raw_fd(), c.as_ptr(), 0o777) }) {
        Ok(_) => true,
        // Made meanwhile by someone else: theirs, left as it is.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(e),
    };
    let dir = open_at(parent.as_raw_fd(), name, true)?;
    if let (true, Some(owner)) = (created, owner) {
        hand_over(&parent, &c, &dir, owner)?;
    }
    Ok((dir, created))
}

/// Hands the directory `dir`, just made as `name` in `parent`, to `(uid, gid)`; where that fails
/// (root without CAP_CHOWN), removes it, so that it is not left behind as root's.
fn hand_over(parent: &OwnedFd, name: &CString, dir: &OwnedFd, (uid, gid): (u32, u32)) -> io::Result<()> {
    std::os::unix::fs::fchown(dir, Some(uid), Some(gid)).inspect_err(|_| {
        // SAFETY: a live directory descriptor and a NUL-terminated name.
        unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) };
    })
}

/// Opens directory `name` relative to directory descriptor `at` (or the working directory for
/// `AT_FDCWD`), following a symbolic link in its last component unless `no_follow`.
fn open_at(at: libc::c_int, name: &OsStr, no_follow: bool) -> io::Result<OwnedFd> {
    let name = c_name(name)?;
    let flags =
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | if no_follow { libc::O_NOFOLLOW } else { 0 };
    // SAFETY: a directory descriptor (or AT_FDCWD) and a NUL-terminated name.
    let fd = checked(unsafe { libc::openat(at, name.as_ptr(), flags) })?;
    // SAFETY: a descriptor openat just returned, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the name"))
}

/// The value of a libc call that returns -1 on failure, or the error it left in errno.
fn checked(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtrace-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// A name xtrace picks is made anew: a symbolic link planted for it (to a directory whose
    /// files it would otherwise replace) and an existing directory are passed over.
    #[test]
    fn a_fresh_directory_passes_over_taken_names() {
        let top = scratch("fresh");
        let victim = top.join("victim");
        std::fs::create_dir_all(&victim).unwrap();
        std::os::unix::fs::symlink(&victim, top.join("run")).unwrap();
        std::fs::create_dir(top.join("run-2")).unwrap();
        let dir = Dir::create_fresh(&top, "run", None).unwrap();
        assert_eq!(dir.path(), top.join("run-3"));
        dir.create_file("summary.json").unwrap();
        assert!(top.join("run-3/summary.json").is_file());
        assert_eq!(
            std::fs::read_dir(&victim).unwrap().count(),
            0,
            "nothing went through the link"
        );
        assert_eq!(std::fs::read_dir(top.join("run-2")).unwrap().count(), 0);
        assert_eq!(
            Dir::create_fresh(&top, "run", None).unwrap().path(),
            top.join("run-4")
        );
        std::fs::remove_dir_all(&top).unwrap();
    }

    #[test]
    fn creates_missing_parents_and_stays_with_the_directory_it_opened() {
        let top = scratch("moved");
        let dir = Dir::open_or_create(&top.join("a/b"), None).unwrap();
        assert!(top.join("a/b").is_dir());
        // The directory is swapped for a link to elsewhere: files still go where it went.
        std::fs::rename(top.join("a/b"), top.join("a/moved")).unwrap();
        std::fs::create_dir(top.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(top.join("elsewhere"), top.join("a/b")).unwrap();
        dir.create_file("x").unwrap();
        dir.rename("x", "y").unwrap();
        assert_eq!(dir.kind("y").unwrap(), Some(Kind::File));
        assert!(top.join("a/moved/y").is_file());
        assert_eq!(std::fs::read_dir(top.join("elsewhere")).unwrap().count(), 0);
        assert!(
            dir.by_descriptor().join("y").is_file(),
            "the descriptor's path is the directory"
        );
        dir.remove_file("y").unwrap();
        assert_eq!(dir.kind("y").unwrap(), None);
        std::fs::remove_dir_all(&top).unwrap();
    }

    #[test]
    fn never_creates_through_a_link() {
        let top = scratch("link");
        let dir = Dir::open_or_create(&top, None).unwrap();
        std::os::unix::fs::symlink(top.join("target"), top.join("link")).unwrap();
        let err = dir.create_file("link").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EEXIST), "{err}");
        assert!(!top.join("target").exists());
        assert_eq!(dir.kind("link").unwrap(), Some(Kind::Symlink));
        dir.create_file("new").unwrap();
        assert_eq!(
            dir.create_file("new").unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        std::fs::create_dir(top.join("sub")).unwrap();
        assert_eq!(dir.kind("sub").unwrap(), Some(Kind::Directory));
        assert_eq!(
            dir.remove_file("sub").unwrap_err().raw_os_error(),
            Some(libc::EISDIR)
        );
        std::fs::remove_dir_all(&top).unwrap();
    }
}
