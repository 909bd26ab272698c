//! Python frames in CPU samples and off-CPU waits. At a process's first sample (and again while it maps no
//! interpreter or has not started one yet) its CPython is looked for (`detect`), the layout of
//! its minor version picked (`layout`) and checked against the live process before the kernel is
//! given it (`PY_PROCS`); the kernel's walks (`PyStackEvent`) are named while the process lives
//! (`names`), cached per code object, and handed to the record they belong to (a CPU sample, an
//! off-CPU wait: both go through [`Python::frames`] and [`Python::stitch`]). One summary line
//! per Python process says what was recognised and how, or why not. docs/internals/python.md
//! has the layouts and how each was checked.
pub mod detect;
pub mod gil;
pub mod layout;
pub mod names;
pub mod stitch;

use std::{
    collections::HashMap,
    hash::BuildHasherDefault,
    time::{Duration, Instant},
};

use aya::maps::{HashMap as BpfHashMap, MapData};
use serde::Serialize;
use xtrace_common::python::{PyLayout, PyStackEvent, PY_FRAME_ENTRY, PY_MAX_FRAMES, PY_NO_FIELD};

use detect::Interpreter;
use layout::Layout;

/// How long to wait before looking at a process again whose interpreter has not started.
const RETRY: Duration = Duration::from_millis(20);
/// Code objects named, at most; past it the cache starts over.
const MAX_CODES: usize = 65536;
/// Frames (code object and instruction) named, at most; past it the cache starts over.
const MAX_FRAMES: usize = 1 << 18;
/// Thread states looked at when checking a layout.
const CHECK_THREADS: usize = 64;
/// Checks in a row that found a thread state or frame not fitting the layout before it is
/// refused: the threads run while they are read, so a frame popped and reused between two reads
/// can fail one check, but a layout that does not fit fails every one.
const MISFITS_TO_REFUSE: u8 = 3;
/// Walks kept per thread until a record of their time takes them.
const KEPT_WALKS: usize = 2;

/// One Python process's line in summary.json (`python`) and summary.txt.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PythonEntry {
    pub pid: u32,
    /// `recognised`, `refused` or `not started`.
    pub status: &'static str,
    /// The interpreter and how it was recognised, or why it was not.
    pub detail: String,
}

enum State {
    /// Maps no CPython (yet): looked at again when its image has more mappings.
    NotPython {
        mapped: usize,
    },
    /// Its interpreter cannot be used.
    Refused(String),
    /// Its interpreter has no thread running Python code yet, or its last checks did not fit
    /// (`misfits` of them in a row).
    Waiting {
        why: String,
        at: Instant,
        found: Box<(Interpreter, Layout)>,
        misfits: u8,
    },
    Recognised(Box<(Interpreter, Layout)>, String),
}

/// A Python frame as named: its function and the line it was at.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PyName {
    pub qualname: String,
    pub filename: String,
    pub def_line: u32,
    pub line: u32,
}

/// Python frames per sampled stack, and the processes' interpreters.
#[derive(Default)]
pub struct Python {
    /// The kernel's table of layouts; None with `--no-python` or without sampling.
    procs: Option<BpfHashMap<MapData, u32, PyLayout>>,
    states: HashMap<u32, State>,
    codes: HashMap<(u32, u64, u64), Option<names::Code>>,
    /// Frame ids by (pid, code object, identity, instruction): a frame seen before is named by
    /// one look-up (None: not begun yet).
    frame_ids: HashMap<FrameKey, Option<u32>, BuildHasherDefault<WordHasher>>,
    /// Frame names, indexed by the ids stacks hold.
    pub names: Vec<PyName>,
    /// Each name as stacks show it ([`stitch::frame_name`]), by id.
    labels: Vec<String>,
    ids: HashMap<PyName, u32>,
    /// The latest walks of each thread, until the record of their time takes them.
    pending: Walks,
    /// Walks cut short: past `PY_MAX_FRAMES`, or at a frame freed under the walk.
    pub truncated: u64,
    /// Frames whose code object could not be named (freed or reused by the time it was read).
    pub unnamed: u64,
    /// What naming the walks took.
    pub cost: NamingCost,
}

/// What naming the kernel's walks took (`--overhead`: summary.json's `symbolize`): one clock
/// pair per walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NamingCost {
    /// Walks named: one per CPU sample of a recognised process, off-CPU wait and `--stacks` call.
    pub walks: u64,
    /// Frames named in them.
    pub frames: u64,
    /// Code objects read from the processes' memory: the frames the cache did not name.
    pub codes_read: u64,
    /// Time spent naming them.
    pub ns: u64,
    /// Time the first walk took: every code object in it read (the cache was empty).
    pub first_walk_ns: Option<u64>,
}

impl std::fmt::Debug for Python {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Python")
            .field("on", &self.procs.is_some())
            .field("processes", &self.states.len())
            .field("names", &self.names.len())
            .finish()
    }
}

/// What names a walked frame: its process, code object, identity and instruction.
type FrameKey = (u32, u64, u64, u32);

/// A hasher for keys of a few integers the kernel read (the frame cache's): a rotate and a
/// multiply per word, where SipHash's defence against chosen keys costs more than the rest of a
/// frame's naming.
#[derive(Default)]
struct WordHasher(u64);

impl std::hash::Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(26) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The top bit of a frame id in a stack: the frame is the outermost of its eval-loop call.
pub const ENTRY_BIT: u32 = 1 << 31;

impl Python {
    /// Python frames walked through `procs`, the kernel's table of layouts (None: off).
    pub fn new(procs: Option<BpfHashMap<MapData, u32, PyLayout>>) -> Self {
        Python {
            procs,
            ..Python::default()
        }
    }

    /// Process `pid`, with `maps` mapped, was sampled: looks for its interpreter if it is new,
    /// maps more than when last looked at, or waits for its interpreter to start.
    pub fn seen(&mut self, pid: u32, maps: &[crate::procfs::Mapping]) {
        if self.procs.is_none() {
            return;
        }
        let found = match self.states.get(&pid) {
            None => None,
            Some(State::NotPython { mapped }) if *mapped < maps.len() => None,
            // Found again: while the loader maps the file, a mapping seen first may be gone.
            Some(State::Waiting { at, .. }) if at.elapsed() >= RETRY => None,
            Some(_) => return,
        };
        let found = match found {
            Some(found) => found,
            None => match detect::find(pid, &current_maps(pid).unwrap_or_else(|| maps.to_vec())) {
                None => {
                    self.states.insert(pid, State::NotPython { mapped: maps.len() });
                    return;
                }
                Some(Err(why)) => {
                    self.refuse(pid, why);
                    return;
                }
                Some(Ok(interpreter)) => match pick(pid, &interpreter) {
                    Ok(layout) => (interpreter, layout),
                    Err(Check::Refuse(why)) => {
                        self.refuse(pid, why);
                        return;
                    }
                    // Not mapped in full yet: looked at again at a later sample.
                    Err(Check::Wait(_) | Check::Misfit(_)) => return,
                },
            },
        };
        let (interpreter, layout) = &found;
        match check(pid, interpreter, layout) {
            Ok(how) => {
                let mut walk = layout.walk;
                walk.runtime = interpreter.runtime;
                if let Some(procs) = &mut self.procs {
                    if let Err(e) = procs.insert(pid, walk, 0) {
                        self.refuse(
                            pid,
                            format!("the kernel's table of Python processes is full ({e})"),
                        );
                        return;
                    }
                }
                log::debug!("python: process {pid}: {}", describe(interpreter, &how));
                self.states.insert(pid, State::Recognised(Box::new(found), how));
            }
            Err(Check::Wait(why)) => self.wait(pid, why, found, 0),
            Err(Check::Misfit(why)) => {
                let misfits = match self.states.get(&pid) {
                    Some(State::Waiting { misfits, .. }) => misfits + 1,
                    _ => 1,
                };
                match misfits >= MISFITS_TO_REFUSE {
                    true => self.refuse(pid, why),
                    false => self.wait(pid, why, found, misfits),
                }
            }
            Err(Check::Refuse(why)) => self.refuse(pid, why),
        }
    }

    /// Whether process `pid`'s interpreter is recognised, or cannot be (refused, or off): it needs
    /// no other look.
    pub fn settled(&self, pid: u32) -> bool {
        self.procs.is_none()
            || matches!(
                self.states.get(&pid),
                Some(State::Recognised(..) | State::Refused(_))
            )
    }

    /// Looks at process `pid` again at a sample at least [`RETRY`] later.
    fn wait(&mut self, pid: u32, why: String, found: (Interpreter, Layout), misfits: u8) {
        let waiting = State::Waiting {
            why,
            at: Instant::now(),
            found: Box::new(found),
            misfits,
        };
        self.states.insert(pid, waiting);
    }

    fn refuse(&mut self, pid: u32, why: String) {
        log::info!("python: process {pid}: {why}");
        self.states.insert(pid, State::Refused(why));
    }

    /// Names the frames of a walk and keeps them for its sample.
    pub fn walked(&mut self, event: &PyStackEvent) {
        let pid = event.header.pid;
        let Some(State::Recognised(found, _)) = self.states.get(&pid) else {
            return;
        };
        let (code_type, layout) = (found.0.code_type, found.1);
        let started = Instant::now();
        if event.flags != 0 {
            self.truncated += 1;
        }
        let len = (event.len as usize).min(PY_MAX_FRAMES);
        log::trace!(
            "python: walk of {} frames, flags {}: {:?}",
            event.len,
            event.flags,
            &event.frames[..len.min(4)]
        );
        let mut ids = Vec::with_capacity(len);
        for frame in &event.frames[..len] {
            let key = (pid, frame.code, frame.identity, frame.instr);
            let id = match self.frame_ids.get(&key) {
                Some(&id) => id,
                None => {
                    let id = self.name_frame(key, code_type, &layout.code);
                    if self.frame_ids.len() >= MAX_FRAMES {
                        self.frame_ids.clear();
                    }
                    self.frame_ids.insert(key, id);
                    id
                }
            };
            let entry = if frame.flags & PY_FRAME_ENTRY != 0 {
                ENTRY_BIT
            } else {
                0
            };
            match id {
                Some(id) => {
                    // Unnamed: its place is kept, so the frames around it stay where they ran.
                    self.unnamed += u64::from(self.names[id as usize].filename.is_empty());
                    ids.push(id | entry);
                }
                // Not begun yet: CPython leaves it out of tracebacks too. An entry mark moves to
                // the frame above it.
                None => {
                    if let Some(last) = ids.last_mut() {
                        *last |= entry;
                    }
                }
            }
        }
        self.pending
            .keep(event.header.tid, event.header.ts_ns, ids.into());
        let ns = started.elapsed().as_nanos() as u64;
        let cost = &mut self.cost;
        (cost.walks, cost.frames, cost.ns) = (cost.walks + 1, cost.frames + len as u64, cost.ns + ns);
        cost.first_walk_ns.get_or_insert(ns);
    }

    /// The id of the frame `key` names, its code object read from the process unless cached;
    /// None for a frame that has not begun its body.
    fn name_frame(&mut self, key: FrameKey, code_type: u64, layout: &layout::CodeLayout) -> Option<u32> {
        let (pid, address, identity, instr) = key;
        if self.codes.len() >= MAX_CODES {
            self.codes.clear();
        }
        let code = self.codes.entry((pid, address, identity)).or_insert_with(|| {
            self.cost.codes_read += 1;
            names::code(pid, layout, code_type, address, identity)
        });
        let name = match code {
            None => unknown(),
            Some(code) => PyName {
                qualname: code.qualname.clone(),
                filename: code.filename.clone(),
                def_line: code.firstlineno,
                line: code.line(code.unit(instr)?),
            },
        };
        Some(self.intern(name))
    }

    fn intern(&mut self, name: PyName) -> u32 {
        if let Some(&id) = self.ids.get(&name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.labels.push(stitch::frame_name(&name));
        self.names.push(name.clone());
        self.ids.insert(name, id);
        id
    }

    /// The Python frames walked for the record (a CPU sample, an off-CPU wait) of thread `tid` at
    /// `ts_ns`, innermost first; none when no walk has that time.
    pub fn frames(&self, tid: u32, ts_ns: u64) -> Box<[u32]> {
        self.pending.frames(tid, ts_ns)
    }

    /// `native`, a stack's frame names outermost first, with the Python frames `python` (as
    /// [`Python::frames`] gave them) in place of the eval-loop frames that ran them: the one
    /// stitch every stack with Python frames goes through (CPU samples, off-CPU waits).
    pub fn stitch(&self, native: Vec<String>, python: &[u32]) -> Vec<String> {
        stitch::stitch(native, python, &self.labels)
    }

    /// One entry per process that maps a CPython interpreter, by pid.
    pub fn entries(&self) -> Vec<PythonEntry> {
        let mut entries: Vec<PythonEntry> = self
            .states
            .iter()
            .filter_map(|(&pid, state)| {
                let (status, detail) = match state {
                    State::NotPython { .. } => return None,
                    State::Refused(why) => ("refused", why.clone()),
                    State::Waiting { why, found, .. } => ("not started", format!("{}: {why}", found.0.path)),
                    State::Recognised(found, how) => ("recognised", describe(&found.0, how)),
                };
                Some(PythonEntry { pid, status, detail })
            })
            .collect();
        entries.sort_by_key(|e| e.pid);
        entries
    }
}

/// The latest [`KEPT_WALKS`] walks of each thread, newest last: (time, frame ids with
/// [`ENTRY_BIT`] on the outermost of each eval-loop call). More than one: a CPU sample, with its
/// own walk, may interrupt the program that walks for an off-CPU wait before it sends the wait.
#[derive(Default)]
struct Walks(HashMap<u32, Vec<Walk>>);

/// One walk: its time, and its frame ids innermost first.
type Walk = (u64, Box<[u32]>);

impl Walks {
    fn keep(&mut self, tid: u32, ts_ns: u64, ids: Box<[u32]>) {
        let walks = self.0.entry(tid).or_default();
        if walks.len() >= KEPT_WALKS {
            walks.remove(0);
        }
        walks.push((ts_ns, ids));
    }

    /// The frames of the walk of thread `tid` at `ts_ns`; none when there is none. Not removed:
    /// one wait makes two stacks (its sleep, then its wait for a CPU) from one walk.
    fn frames(&self, tid: u32, ts_ns: u64) -> Box<[u32]> {
        self.0
            .get(&tid)
            .and_then(|walks| walks.iter().rev().find(|(at, _)| *at == ts_ns))
            .map(|(_, ids)| ids.clone())
            .unwrap_or_default()
    }
}

/// What process `pid` maps now (its executable mappings), if it still runs.
fn current_maps(pid: u32) -> Option<Vec<crate::procfs::Mapping>> {
    crate::procfs::read_maps(pid)
}

/// The name of a frame whose code object could not be read.
fn unknown() -> PyName {
    PyName {
        qualname: "[unknown Python frame]".into(),
        filename: String::new(),
        def_line: 0,
        line: 0,
    }
}

/// `CPython 3.11.7 (shared /path/libpython3.11.so.1.0; version from Py_Version, _PyRuntime in
/// .dynsym, offsets from xtrace's 3.11 table; checked: ...)`.
fn describe(interpreter: &Interpreter, how: &str) -> String {
    format!(
        "CPython {} ({} {}; version from {}, _PyRuntime in {}, {how})",
        interpreter.version,
        if interpreter.shared { "shared" } else { "static" },
        interpreter.path,
        interpreter.version_from,
        interpreter.table,
    )
}

/// The layout for `interpreter`'s minor version: a table, or 3.13's debug offsets read from
/// the process; an unknown minor is refused by name.
fn pick(pid: u32, interpreter: &Interpreter) -> Result<Layout, Check> {
    match interpreter.minor {
        10..=12 => Ok(layout::table(interpreter.minor).expect("a table for 3.10 to 3.12")),
        13 => {
            let bytes =
                names::read(pid, interpreter.runtime, layout::DEBUG_OFFSETS_LEN).ok_or_else(|| {
                    Check::Wait(format!("{}: _PyRuntime is not readable yet", interpreter.path))
                })?;
            layout::from_debug_offsets(&bytes)
                .map_err(|why| Check::Refuse(format!("CPython {}: {why}", interpreter.version)))
        }
        _ => Err(Check::Refuse(format!(
            "CPython {} ({}): no known layout for Python 3.{}; xtrace walks 3.10 to 3.13",
            interpreter.version, interpreter.path, interpreter.minor
        ))),
    }
}

enum Check {
    /// Not yet: the interpreter has no thread running Python code.
    Wait(String),
    /// A thread state or a running frame did not fit the layout this time
    /// ([`MISFITS_TO_REFUSE`]).
    Misfit(String),
    /// The layout does not fit the process.
    Refuse(String),
}

/// Checks `layout` against the live process: its interpreter's thread states point back at
/// it, and the code object of a running frame has `PyCode_Type` for its type. Returns how the
/// layout was found and checked.
fn check(pid: u32, interpreter: &Interpreter, layout: &Layout) -> Result<String, Check> {
    let walk = &layout.walk;
    let read = |address: u64| names::read_u64(pid, address);
    // Its data may not be mapped yet, at the first instructions of a launched python.
    let unreadable = || Check::Wait(format!("{}: _PyRuntime is not readable yet", interpreter.path));
    let interp = read(interpreter.runtime + u64::from(walk.interpreters_head)).ok_or_else(unreadable)?;
    if interp == 0 {
        return Err(Check::Wait("no interpreter yet".into()));
    }
    let mut tstate = read(interp + u64::from(walk.threads_head)).ok_or_else(unreadable)?;
    for _ in 0..CHECK_THREADS {
        if tstate == 0 {
            break;
        }
        if read(tstate + u64::from(layout.tstate_interp)) != Some(interp) {
            return Err(Check::Misfit(format!(
                "CPython {}: a thread state does not point back at its interpreter: the layout does not fit",
                interpreter.version
            )));
        }
        if let Some(frame) = first_frame(pid, walk, tstate) {
            let code = read(frame + u64::from(walk.frame_code)).unwrap_or(0);
            if code != 0 && read(code + 8) == Some(interpreter.code_type) {
                let source = match interpreter.minor {
                    13 => "offsets from its _Py_DebugOffsets".to_string(),
                    minor => format!("offsets from xtrace's 3.{minor} table"),
                };
                return Ok(format!(
                    "{source}, checked: thread state to interpreter, frame's code is PyCode_Type"
                ));
            }
            // The thread runs while it is read: a frame popped between the two reads holds
            // anything. A frame that is no longer the thread's innermost one says nothing; one
            // that still is counts against the layout.
            if code != 0 && first_frame(pid, walk, tstate) != Some(frame) {
                return Err(Check::Wait("a running frame changed while it was read".into()));
            }
            if code != 0 {
                return Err(Check::Misfit(format!(
                    "CPython {}: a running frame's code object is not of PyCode_Type: the layout does not fit",
                    interpreter.version
                )));
            }
        }
        tstate = read(tstate + u64::from(walk.tstate_next)).unwrap_or(0);
    }
    Err(Check::Wait("no thread runs Python code yet".into()))
}

/// The innermost frame of thread state `tstate`, when it runs one.
fn first_frame(pid: u32, walk: &PyLayout, tstate: u64) -> Option<u64> {
    let at = names::read_u64(pid, tstate + u64::from(walk.tstate_frame)).filter(|&a| a != 0)?;
    match walk.cframe_current {
        PY_NO_FIELD => Some(at),
        current => names::read_u64(pid, at + u64::from(current)).filter(|&a| a != 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_is_found_by_its_time_past_a_sample_walked_in_between() {
        let mut walks = Walks::default();
        walks.keep(7, 100, [1, 2 | ENTRY_BIT].into());
        // A CPU sample of the same thread interrupts before the wait's record is sent.
        walks.keep(7, 150, [3].into());
        assert_eq!(&*walks.frames(7, 150), &[3]);
        assert_eq!(&*walks.frames(7, 100), &[1, 2 | ENTRY_BIT]);
        // Taken twice: the wait's sleep and its wait for a CPU.
        assert_eq!(&*walks.frames(7, 100), &[1, 2 | ENTRY_BIT]);
        assert!(walks.frames(8, 100).is_empty());
        assert!(walks.frames(7, 120).is_empty());
        // Only the latest two are kept.
        walks.keep(7, 200, [4].into());
        assert!(walks.frames(7, 100).is_empty());
        assert_eq!(&*walks.frames(7, 200), &[4]);
    }
}
