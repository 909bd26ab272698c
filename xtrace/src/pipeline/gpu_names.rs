//! The GPU device timeline's kernel names and notices, put together from `DeviceName` pieces: those
//! the ring buffer brought, in order, and those it had no room for, which the kernel program kept
//! ([`KeptPieces`]) because the tool library sends each text only once: a kernel name's in
//! `GPU_NAME_PIECES`, looked up when a record names the kernel, a notice's in
//! `GPU_NOTICE_PIECES`, all taken out after each read of the ring. A text is whole at its piece
//! shorter than a chunk (the tool library ends a text of whole chunks with an empty one) or at
//! `NAME_MAX` bytes.
use std::collections::{BTreeMap, HashMap};

use aya::maps::MapData;
use xtrace_common::gpu::{record_kind, DeviceName, NamePieceKey, NAME_CHUNK, NAME_MAX};

/// What a kernel with no name, or a name none of whose pieces came, is called.
pub const UNNAMED: &str = "(unnamed kernel)";

/// The pieces of names or notices the ring buffer had no room for.
pub trait KeptPieces: Send {
    /// Takes out the piece kept for (process id, text id, offset), if one is.
    fn take(&mut self, key: NamePieceKey) -> Option<DeviceName>;

    /// Takes out every piece kept, with its key.
    fn take_all(&mut self) -> Vec<(NamePieceKey, DeviceName)>;
}

/// The kernel program's tables of them.
impl KeptPieces for aya::maps::HashMap<MapData, NamePieceKey, DeviceName> {
    fn take(&mut self, key: NamePieceKey) -> Option<DeviceName> {
        let piece = self.get(&key, 0).ok()?;
        // Out of the table, so that it holds only what is still to be read. (A piece kept again
        // at the same key in between, by a new session after an exec, is lost with it.)
        let _ = self.remove(&key);
        Some(piece)
    }

    fn take_all(&mut self) -> Vec<(NamePieceKey, DeviceName)> {
        // Keys first: a key taken out while iterating would end the walk early.
        let keys: Vec<NamePieceKey> = self.keys().filter_map(Result::ok).collect();
        keys.into_iter()
            .filter_map(|key| Some((key, self.take(key)?)))
            .collect()
    }
}

/// Names and notices of the traced processes.
#[derive(Default)]
pub struct DeviceNames {
    /// Kernel names by (pid, id), once whole or looked up.
    names: HashMap<(u32, u32), String>,
    /// Pieces of texts not whole yet, by (pid, kind, id), then by offset.
    partial: HashMap<(u32, u32, u32), BTreeMap<u32, Vec<u8>>>,
    /// Kernel name pieces the ring had no room for.
    kept: Option<Box<dyn KeptPieces>>,
    /// Notice pieces the ring had no room for.
    kept_notices: Option<Box<dyn KeptPieces>>,
}

impl std::fmt::Debug for DeviceNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceNames")
            .field("names", &self.names)
            .field("partial", &self.partial)
            .field("kept", &self.kept.is_some())
            .field("kept_notices", &self.kept_notices.is_some())
            .finish()
    }
}

impl DeviceNames {
    /// Names that also look up the name pieces `names` holds, and notices that also take those
    /// `notices` holds.
    pub fn with_kept(names: Box<dyn KeptPieces>, notices: Box<dyn KeptPieces>) -> Self {
        DeviceNames {
            kept: Some(names),
            kept_notices: Some(notices),
            ..DeviceNames::default()
        }
    }

    /// A piece from the ring buffer of process `pid`; the text of a notice once it is whole.
    pub fn piece(&mut self, pid: u32, piece: &DeviceName) -> Option<String> {
        if piece.offset == 0 && piece.kind == record_kind::NAME {
            // A name's pieces come in order: this begins it anew (after an exec, a new tracing
            // session numbers its names from 1 again). A notice's id is never used again.
            self.partial.remove(&(pid, piece.kind, piece.id));
            self.names.remove(&(pid, piece.id));
        }
        self.add(pid, piece)
    }

    /// The notices whose last pieces the ring had no room for, whole now with the pieces kept:
    /// (process id, text), in the order the process sent them.
    pub fn kept_notices(&mut self) -> Vec<(u32, String)> {
        let Some(kept) = &mut self.kept_notices else {
            return Vec::new();
        };
        let mut pieces = kept.take_all();
        pieces.sort_unstable_by_key(|&(key, _)| key);
        pieces
            .iter()
            .filter(|(_, piece)| piece.kind == record_kind::NOTICE)
            .filter_map(|([pid, ..], piece)| Some((*pid, self.add(*pid, piece)?)))
            .collect()
    }

    /// Adds a piece, from the ring or kept, wherever it is in its text; the text of a notice once
    /// it is whole.
    fn add(&mut self, pid: u32, piece: &DeviceName) -> Option<String> {
        let len = (piece.len as usize).min(NAME_CHUNK);
        // The tool library cuts texts in whole chunks; a piece anywhere else is no piece of it.
        if piece.offset as usize >= NAME_MAX || !(piece.offset as usize).is_multiple_of(NAME_CHUNK) {
            return None;
        }
        let key = (pid, piece.kind, piece.id);
        let pieces = self.partial.entry(key).or_default();
        pieces.insert(piece.offset, piece.text[..len].to_vec());
        let (text, true) = joined(pieces, |_| None) else {
            return None;
        };
        self.partial.remove(&key);
        match piece.kind {
            record_kind::NAME => {
                self.names.insert((pid, piece.id), name_of(&text));
                None
            }
            _ => Some(String::from_utf8_lossy(&text).into_owned()),
        }
    }

    /// Forgets process `pid`'s names: its tool library began a new tracing session, which
    /// numbers its names from 1 again (after an exec, a new attach).
    pub fn forget(&mut self, pid: u32) {
        self.names.retain(|&(p, _), _| p != pid);
        self.partial.retain(|&(p, _, _), _| p != pid);
    }

    /// The name of kernel `id` of process `pid`: from its pieces, those the ring buffer brought
    /// and those kept for want of room; [`UNNAMED`] for id 0 or a name with no piece at all. A name
    /// some of whose pieces are lost is cut at the first missing one.
    pub fn kernel(&mut self, pid: u32, id: u32) -> String {
        if let Some(name) = self.names.get(&(pid, id)) {
            return name.clone();
        }
        let pieces = self
            .partial
            .remove(&(pid, record_kind::NAME, id))
            .unwrap_or_default();
        let (text, _) = match (&mut self.kept, id) {
            (_, 0) => (Vec::new(), false),
            (Some(kept), _) => joined(&pieces, |offset| {
                let piece = kept.take([pid, id, offset])?;
                Some(piece.text[..(piece.len as usize).min(NAME_CHUNK)].to_vec())
            }),
            (None, _) => joined(&pieces, |_| None),
        };
        let name = name_of(&text);
        self.names.insert((pid, id), name.clone());
        name
    }
}

/// A kernel's name of `text`: [`UNNAMED`] when empty.
fn name_of(text: &[u8]) -> String {
    match text.is_empty() {
        true => UNNAMED.into(),
        false => String::from_utf8_lossy(text).into_owned(),
    }
}

/// The pieces' text from offset 0 up to the first one missing (taken from `more` if it has it),
/// and whether that is the whole text.
fn joined(pieces: &BTreeMap<u32, Vec<u8>>, mut more: impl FnMut(u32) -> Option<Vec<u8>>) -> (Vec<u8>, bool) {
    let mut text = Vec::new();
    loop {
        let offset = text.len() as u32;
        let Some(piece) = pieces.get(&offset).cloned().or_else(|| more(offset)) else {
            return (text, false);
        };
        let last = piece.len() < NAME_CHUNK;
        text.extend_from_slice(&piece);
        if last || text.len() >= NAME_MAX {
            text.truncate(NAME_MAX);
            return (text, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl KeptPieces for HashMap<NamePieceKey, DeviceName> {
        fn take(&mut self, key: NamePieceKey) -> Option<DeviceName> {
            self.remove(&key)
        }

        fn take_all(&mut self) -> Vec<(NamePieceKey, DeviceName)> {
            self.drain().collect()
        }
    }

    fn no_kept() -> Box<dyn KeptPieces> {
        Box::new(HashMap::<NamePieceKey, DeviceName>::new())
    }

    fn piece(kind: u32, id: u32, offset: usize, text: &[u8]) -> DeviceName {
        let mut piece = DeviceName {
            kind,
            id,
            offset: offset as u32,
            len: text.len() as u32,
            text: [0; NAME_CHUNK],
        };
        piece.text[..text.len()].copy_from_slice(text);
        piece
    }

    /// A name of `len` bytes, each its offset's letter.
    fn text(len: usize) -> Vec<u8> {
        (0..len).map(|i| b'a' + (i % 26) as u8).collect()
    }

    /// A text's pieces as the tool library sends them.
    fn pieces_of(kind: u32, id: u32, text: &[u8]) -> Vec<DeviceName> {
        xtrace_common::gpu::name_pieces(kind, id, text).collect()
    }

    #[test]
    fn a_name_is_whole_at_its_short_piece() {
        let mut names = DeviceNames::default();
        for len in [1, NAME_CHUNK - 1, NAME_CHUNK, 2 * NAME_CHUNK, 2 * NAME_CHUNK + 7] {
            let id = len as u32;
            let name = text(len);
            let pieces = pieces_of(record_kind::NAME, id, &name);
            let (last, first) = pieces.split_last().unwrap();
            for p in first {
                assert_eq!(names.piece(9, p), None);
                assert!(!names.names.contains_key(&(9, id)), "{len}");
            }
            assert_eq!(names.piece(9, last), None);
            assert_eq!(names.kernel(9, id).as_bytes(), name, "{len}");
        }
        assert!(names.partial.is_empty());
    }

    #[test]
    fn a_notice_is_whole_at_its_short_piece() {
        let mut names = DeviceNames::default();
        let line = text(NAME_CHUNK);
        let pieces = pieces_of(record_kind::NOTICE, 1, &line);
        assert_eq!(pieces.len(), 2);
        assert_eq!(names.piece(4, &pieces[0]), None);
        assert_eq!(names.piece(4, &pieces[1]).unwrap().as_bytes(), line);
        let short = piece(record_kind::NOTICE, 2, 0, b"CUPTI is held");
        assert_eq!(names.piece(4, &short).as_deref(), Some("CUPTI is held"));
        assert!(names.partial.is_empty());
    }

    /// Notices whose pieces the ring had no room for, some or all, are whole once the kept ones
    /// are taken, in whichever order the ring's and the kept ones come; each once, in the order
    /// sent.
    #[test]
    fn kept_notice_pieces_make_whole_notices() {
        let long = text(2 * NAME_CHUNK + 9);
        let pieces = pieces_of(record_kind::NOTICE, 2, &long);
        let short = pieces_of(record_kind::NOTICE, 1, b"CUPTI is held");
        for lost in [vec![0], vec![1], vec![2], vec![0, 2], vec![0, 1, 2]] {
            let mut kept: HashMap<NamePieceKey, DeviceName> = HashMap::new();
            kept.insert([7, 1, 0], short[0]);
            // Another process's, and a name's piece that is no notice's.
            kept.insert([8, 1, 0], piece(record_kind::NOTICE, 1, 0, b"other"));
            kept.insert([7, 3, 0], piece(record_kind::NAME, 3, 0, b"kernel"));
            let mut names = DeviceNames::with_kept(no_kept(), no_kept());
            let mut came = Vec::new();
            for (i, p) in pieces.iter().enumerate() {
                match lost.contains(&i) {
                    true => drop(kept.insert([7, 2, p.offset], *p)),
                    false => came.extend(names.piece(7, p)),
                }
            }
            assert!(came.is_empty(), "{lost:?}: {came:?}");
            names.kept_notices = Some(Box::new(kept));
            let whole = names.kept_notices();
            let long = String::from_utf8(long.clone()).unwrap();
            assert_eq!(
                whole,
                [
                    (7, "CUPTI is held".to_string()),
                    (7, long),
                    (8, "other".to_string())
                ],
                "{lost:?}"
            );
            assert_eq!(names.kept_notices(), [], "taken out: {lost:?}");
            assert!(names.partial.is_empty(), "{lost:?}");
        }
        // A kept piece taken before the ring's first piece was read: the first still completes it.
        let mut kept: HashMap<NamePieceKey, DeviceName> = HashMap::new();
        kept.insert([7, 2, pieces[1].offset], pieces[1]);
        kept.insert([7, 2, pieces[2].offset], pieces[2]);
        let mut names = DeviceNames::with_kept(no_kept(), Box::new(kept));
        assert_eq!(names.kept_notices(), []);
        assert_eq!(
            names.piece(7, &pieces[0]).as_deref().map(str::as_bytes),
            Some(&long[..])
        );
    }

    /// Pieces the ring had no room for come from the kept ones, wherever they are in the name.
    #[test]
    fn lost_pieces_are_looked_up_in_the_kept_ones() {
        let name = text(3 * NAME_CHUNK + 5);
        let pieces = pieces_of(record_kind::NAME, 2, &name);
        for lost in [vec![0], vec![1], vec![3], vec![0, 1, 2, 3], vec![1, 3]] {
            let mut kept: HashMap<NamePieceKey, DeviceName> = HashMap::new();
            let mut names = DeviceNames::default();
            for (i, p) in pieces.iter().enumerate() {
                match lost.contains(&i) {
                    true => drop(kept.insert([5, p.id, p.offset], *p)),
                    false => assert_eq!(names.piece(5, p), None),
                }
            }
            let mut names = DeviceNames {
                kept: Some(Box::new(kept)),
                ..names
            };
            assert_eq!(names.kernel(5, 2).as_bytes(), name, "{lost:?}");
            // Looked up once, then known.
            assert_eq!(names.kernel(5, 2).as_bytes(), name);
        }
    }

    #[test]
    fn a_name_with_pieces_lost_for_good_is_cut_or_unnamed() {
        let name = text(2 * NAME_CHUNK + 5);
        let pieces = pieces_of(record_kind::NAME, 3, &name);
        let mut names = DeviceNames::with_kept(no_kept(), no_kept());
        // The first piece came, the second is lost, the third came.
        assert_eq!(names.piece(1, &pieces[0]), None);
        assert_eq!(names.piece(1, &pieces[2]), None);
        assert_eq!(names.kernel(1, 3).as_bytes(), &name[..NAME_CHUNK]);
        // None came: unnamed; id 0 is no name.
        assert_eq!(names.kernel(1, 4), UNNAMED);
        assert_eq!(names.kernel(1, 0), UNNAMED);
        // Without kept pieces (and none lost), as from the ring alone.
        let mut plain = DeviceNames::default();
        for p in &pieces {
            assert_eq!(plain.piece(1, p), None);
        }
        assert_eq!(plain.kernel(1, 3).as_bytes(), name);
    }

    /// After an exec, the process's new tracing session numbers its names from 1 again.
    #[test]
    fn a_name_sent_again_replaces_the_old_one() {
        let mut names = DeviceNames::default();
        assert_eq!(names.piece(6, &piece(record_kind::NAME, 1, 0, b"old")), None);
        assert_eq!(names.kernel(6, 1), "old");
        assert_eq!(names.piece(6, &piece(record_kind::NAME, 1, 0, b"new")), None);
        assert_eq!(names.kernel(6, 1), "new");
        // The new session's name only among the kept pieces: the session's start forgets the
        // process's names (and no other's).
        assert_eq!(names.piece(7, &piece(record_kind::NAME, 1, 0, b"other")), None);
        let mut kept: HashMap<NamePieceKey, DeviceName> = HashMap::new();
        kept.insert([6, 1, 0], piece(record_kind::NAME, 1, 0, b"newer"));
        let mut names = DeviceNames {
            kept: Some(Box::new(kept)),
            ..names
        };
        names.forget(6);
        assert_eq!(names.kernel(6, 1), "newer");
        assert_eq!(names.kernel(7, 1), "other");
    }

    #[test]
    fn an_empty_name_is_unnamed_and_stray_pieces_are_no_pieces() {
        let mut names = DeviceNames::default();
        assert_eq!(names.piece(3, &piece(record_kind::NAME, 1, 0, b"")), None);
        assert_eq!(names.kernel(3, 1), UNNAMED);
        // A piece at an offset the tool library never sends is left out.
        assert_eq!(names.piece(3, &piece(record_kind::NAME, 2, 5, b"x")), None);
        assert!(names.partial.is_empty());
    }

    #[test]
    fn texts_stop_at_the_longest_name() {
        let mut names = DeviceNames::default();
        let name = text(2000);
        for (i, chunk) in name.chunks(NAME_CHUNK).enumerate() {
            assert_eq!(
                names.piece(8, &piece(record_kind::NAME, 1, i * NAME_CHUNK, chunk)),
                None
            );
        }
        assert_eq!(names.kernel(8, 1).len(), NAME_MAX);
    }
}
