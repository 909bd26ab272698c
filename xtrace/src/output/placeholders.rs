//! `{rank}` and `{host}` in `-o`: one command line for every host and rank of a distributed job
//! (`srun xtrace -o 'prof/{host}-{rank}' -- python train.py`) gives each its own directory.
use std::path::{Path, PathBuf};

use crate::{
    error::{Error, Result},
    model::rank::Rank,
};

/// `path` with `{rank}` replaced by the rank `rank` gives (asked only when the path has one) and
/// `{host}` by this machine's host name. Any other `{NAME}` is refused, so that a typo does not
/// become a directory name; a path without braces is returned as it is.
pub fn expand(path: &Path, rank: impl FnOnce() -> Option<Rank>) -> Result<PathBuf> {
    let Some(text) = path.to_str().filter(|t| t.contains('{')) else {
        return Ok(path.to_path_buf());
    };
    let shown = || text.to_string();
    let mut rank = Some(rank);
    let mut asked: Option<Option<Rank>> = None;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(|| Error::UnknownPlaceholder {
            path: shown(),
            name: after.into(),
        })?;
        match &after[..close] {
            "host" => out.push_str(&host_name()),
            "rank" => {
                // Asked once: a second {rank} is the same rank.
                let found = asked.get_or_insert_with(|| rank.take().and_then(|f| f()));
                let Some(found) = found else {
                    return Err(Error::NoRank { path: shown() });
                };
                out.push_str(&found.rank.to_string());
            }
            name => {
                return Err(Error::UnknownPlaceholder {
                    path: shown(),
                    name: name.into(),
                })
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(PathBuf::from(out))
}

/// This machine's host name (`gethostname`), or `localhost` when it cannot be read.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it when the
    // name fits, and the last byte is kept 0 for when it does not.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) } == 0;
    let len = buf.iter().position(|b| *b == 0).unwrap_or(0);
    match ok && len > 0 {
        true => String::from_utf8_lossy(&buf[..len]).into_owned(),
        false => "localhost".into(),
    }
}

/// The rank xtrace's own environment gives: that of a command launched by `srun xtrace -- ...`.
pub fn own_rank() -> Option<Rank> {
    use std::os::unix::ffi::OsStrExt;
    let entries: Vec<Vec<u8>> = std::env::vars_os()
        .map(|(k, v)| [k.as_bytes(), b"=", v.as_bytes()].concat())
        .collect();
    Rank::from_environ(entries.iter().map(Vec::as_slice))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(n: u32) -> Option<Rank> {
        Some(Rank {
            rank: n,
            local_rank: None,
            world_size: None,
            launcher: "torchrun",
        })
    }

    #[test]
    fn rank_and_host_are_replaced() {
        let host = host_name();
        assert!(!host.is_empty());
        assert_eq!(
            expand(Path::new("prof/{host}-r{rank}"), || rank(3)).unwrap(),
            PathBuf::from(format!("prof/{host}-r3"))
        );
        assert_eq!(
            expand(Path::new("a/{rank}/{rank}"), || rank(7)).unwrap(),
            PathBuf::from("a/7/7")
        );
        // Without braces the rank is never asked for.
        assert_eq!(
            expand(Path::new("plain"), || panic!("not asked")).unwrap(),
            PathBuf::from("plain")
        );
    }

    #[test]
    fn unknown_or_unclosed_placeholders_and_a_missing_rank_are_refused() {
        let err = expand(Path::new("p/{rnak}"), || rank(1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "-o p/{rnak}: {rnak} is no placeholder; use {rank} or {host}, or write the name out"
        );
        assert!(matches!(
            expand(Path::new("p/{rank"), || rank(1)),
            Err(Error::UnknownPlaceholder { .. })
        ));
        let err = expand(Path::new("p/{rank}"), || None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "-o p/{rank}: no rank for {rank}: neither the target's environment nor xtrace's sets \
             RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID or PMI_RANK; write the rank in the path instead"
        );
        assert_eq!(err.exit_code(), 2);
    }
}
