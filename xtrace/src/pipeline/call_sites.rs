//! `--stacks`: where each traced call came from. The kernel sends, at every traced call's entry,
//! its stack (`CallStackEvent`, with its Python frames walked just before it); each is named at
//! once, while its process lives, by its call site: the innermost Python frame
//! (`qualname (file.py:LINE)`, LINE the calling line), else the native caller
//! (`function+0xOFF (module)`). Calls are counted per probe and site as they enter, and their
//! time added when their span ends: a span and its stack share their thread and entry time.
//! A USDT hit's stack comes just before the hit (`CALL_AT_USDT`), is named by the caller of the
//! function the probe is in, and is counted when the hit comes: for an instant probe under the
//! probe, for a pair's begin under the pair's span, whose time is added when the span closes.
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use serde::Serialize;
use xtrace_common::stacks::{CallStackEvent, CALL_AT_USDT, CALL_NATIVE_MAX, CALL_NOT_OPEN};

use crate::{
    image::Images,
    python::{stitch::module_path, Python, ENTRY_BIT},
};

/// How often a process not (yet) recognised as a CPython is looked at again: a launched python
/// maps its interpreter after its first calls.
const LOOK_AGAIN: Duration = Duration::from_millis(20);

/// Call sites listed per probe (and per CUDA kernel) in the summaries.
pub const TOP_SITES: usize = 5;

/// Calls and time of one probe from one call site.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    count: u64,
    total_ns: u64,
}

/// One call site in summary.json (`call_sites`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CallSite {
    /// `qualname (file.py:LINE)` for a Python caller, `function+0xOFF (module)` for a native one.
    pub site: String,
    /// Calls from it.
    pub count: u64,
    /// Their time, summed from their spans (calls with no span, under `--min-duration`, add none).
    pub total_ns: u64,
    /// Its share of the probe's time from every site (of its calls when none has time), 0 to 1.
    pub share: f64,
}

/// A call whose stack came and whose span has not.
#[derive(Clone, Copy, Debug)]
struct Open {
    start_ns: u64,
    depth: u32,
    key: (u32, u32),
}

/// The call sites of every traced call, by probe.
#[derive(Debug, Default)]
pub struct CallSites {
    /// Site names, indexed by site id.
    names: Vec<String>,
    ids: HashMap<String, u32>,
    /// By (probe id or CUDA kernel key, site id).
    tallies: HashMap<(u32, u32), Tally>,
    /// Sites of CUDA launches, by kernel name and site id.
    kernels: HashMap<(String, u32), Tally>,
    /// Open calls per thread, outermost first.
    open: HashMap<u32, Vec<Open>>,
    /// The stack of each thread's next USDT hit: (probe id, site id).
    usdt_next: HashMap<u32, (u32, u32)>,
    /// Open USDT spans per (thread, span probe), innermost last: (begin time, site id).
    usdt_open: HashMap<(u32, u32), Vec<(u64, u32)>>,
    /// Site ids of native callers already named, by (pid, return address).
    native: HashMap<(u32, u64), u32>,
    /// When each process not yet recognised as a CPython was last looked at.
    looked: HashMap<u32, Instant>,
    /// Stacks whose call the entry program had not kept (no span to pair with).
    pub unpaired: u64,
    /// Stacks recorded.
    pub stacks: u64,
}

impl CallSites {
    /// A call's stack: counted at its site, and kept until its span comes.
    pub fn stack(&mut self, images: &mut Images, python: &mut Python, event: &CallStackEvent) {
        let (pid, tid, ts) = (event.header.pid, event.header.tid, event.header.ts_ns);
        self.stacks += 1;
        self.look(python, pid);
        let usdt = event.flags & CALL_AT_USDT != 0;
        let site = match python.frames(tid, ts).first() {
            Some(&id) => {
                let name = python.names.get((id & !ENTRY_BIT) as usize).map(site_name);
                self.intern(name.unwrap_or_else(|| "[unknown Python frame]".into()))
            }
            None => {
                let len = (event.native_len as usize).min(CALL_NATIVE_MAX);
                // At a USDT probe, [0] is the probe itself; [1] is in its function's caller.
                let native = &event.native[..len];
                let caller = match usdt {
                    true => native.get(1).or(native.first()),
                    false => native.first(),
                };
                self.native_site(images, pid, ts, caller.copied().unwrap_or(0))
            }
        };
        if usdt {
            self.usdt_next.insert(tid, (event.probe_id, site));
            return;
        }
        let key = (event.probe_id, site);
        self.tallies.entry(key).or_default().count += 1;
        if event.start_ns == CALL_NOT_OPEN {
            self.unpaired += 1;
            return;
        }
        let open = self.open.entry(tid).or_default();
        // A new call at this depth: those at it or deeper have ended (their spans came, or were
        // not sent: under --min-duration).
        open.retain(|o| o.depth < event.depth);
        open.push(Open {
            start_ns: event.start_ns,
            depth: event.depth,
            key,
        });
    }

    /// A span ended: its time goes to its call's site, which is returned (None: its stack is
    /// not known). `kernel` names the CUDA kernel a launch ran.
    pub fn span(&mut self, tid: u32, start_ns: u64, duration: u64, kernel: Option<&str>) -> Option<&str> {
        let open = self.open.get_mut(&tid)?;
        let at = open.iter().position(|o| o.start_ns == start_ns)?;
        let key = open[at].key;
        // Calls opened after it ended inside it.
        open.truncate(at);
        let tally = self.tallies.entry(key).or_default();
        tally.total_ns += duration;
        if let Some(kernel) = kernel {
            let tally = self.kernels.entry((kernel.to_string(), key.1)).or_default();
            tally.count += 1;
            tally.total_ns += duration;
        }
        self.names.get(key.1 as usize).map(String::as_str)
    }

    /// A hit of USDT probe `probe` on thread `tid` at `ns`, opening a span of probe `span` when
    /// it is a pair's begin: it takes the stack sent just before it, if that was of its probe,
    /// and is counted at its site, under the span for a begin. Returns the site's name.
    pub fn usdt_hit(&mut self, tid: u32, probe: u32, span: Option<u32>, ns: u64) -> Option<&str> {
        let (of, site) = self.usdt_next.remove(&tid)?;
        if of != probe {
            return None;
        }
        self.tallies
            .entry((span.unwrap_or(probe), site))
            .or_default()
            .count += 1;
        if let Some(span) = span {
            self.usdt_open.entry((tid, span)).or_default().push((ns, site));
        }
        self.names.get(site as usize).map(String::as_str)
    }

    /// A USDT span of probe `span` on thread `tid`, begun at `start_ns`, closed after
    /// `duration`: its time goes to its begin's site, which is returned (None: no stack).
    pub fn usdt_closed(&mut self, tid: u32, span: u32, start_ns: u64, duration: u64) -> Option<&str> {
        let open = self.usdt_open.get_mut(&(tid, span))?;
        let at = open.iter().rposition(|&(ns, _)| ns == start_ns)?;
        let (_, site) = open.remove(at);
        self.tallies.entry((span, site)).or_default().total_ns += duration;
        self.names.get(site as usize).map(String::as_str)
    }

    /// The top [`TOP_SITES`] call sites of probe `probe_id`, the most time first.
    pub fn of_probe(&self, probe_id: u32) -> Vec<CallSite> {
        self.top(
            self.tallies
                .iter()
                .filter(|((p, _), _)| *p == probe_id)
                .map(|((_, s), t)| (*s, *t)),
        )
    }

    /// The top call sites of the launches of each CUDA kernel, by kernel name.
    pub fn of_kernels(&self) -> Vec<(String, Vec<CallSite>)> {
        let mut names: Vec<&String> = self.kernels.keys().map(|(k, _)| k).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|name| {
                let sites = self.kernels.iter().filter(|((k, _), _)| k == name);
                (name.clone(), self.top(sites.map(|((_, s), t)| (*s, *t))))
            })
            .collect()
    }

    fn top(&self, sites: impl Iterator<Item = (u32, Tally)>) -> Vec<CallSite> {
        let mut sites: Vec<(u32, Tally)> = sites.collect();
        let total_ns: u64 = sites.iter().map(|(_, t)| t.total_ns).sum();
        let count: u64 = sites.iter().map(|(_, t)| t.count).sum();
        let name = |id: u32| self.names.get(id as usize).cloned().unwrap_or_default();
        sites.sort_by(|(a, x), (b, y)| {
            (y.total_ns, y.count)
                .cmp(&(x.total_ns, x.count))
                .then_with(|| name(*a).cmp(&name(*b)))
        });
        sites
            .into_iter()
            .take(TOP_SITES)
            .map(|(id, t)| CallSite {
                site: name(id),
                count: t.count,
                total_ns: t.total_ns,
                share: match total_ns {
                    0 => t.count as f64 / count.max(1) as f64,
                    total => t.total_ns as f64 / total as f64,
                },
            })
            .collect()
    }

    /// Looks for process `pid`'s interpreter, from what it maps now, unless it was found (or
    /// refused) or was looked at within [`LOOK_AGAIN`].
    fn look(&mut self, python: &mut Python, pid: u32) {
        if python.settled(pid) || self.looked.get(&pid).is_some_and(|at| at.elapsed() < LOOK_AGAIN) {
            return;
        }
        self.looked.insert(pid, Instant::now());
        if let Some(maps) = crate::procfs::read_maps(pid) {
            python.seen(pid, &maps);
        }
    }

    fn intern(&mut self, name: String) -> u32 {
        if let Some(&id) = self.ids.get(&name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.ids.insert(name.clone(), id);
        self.names.push(name);
        id
    }

    /// The site of native return address `address` of process `pid` at `ns`.
    fn native_site(&mut self, images: &mut Images, pid: u32, ns: u64, address: u64) -> u32 {
        if let Some(&id) = self.native.get(&(pid, address)) {
            return id;
        }
        let name = native_name(images, pid, ns, address);
        let id = self.intern(name);
        self.native.insert((pid, address), id);
        id
    }
}

/// A Python caller's site: `qualname (file.py:LINE)`, LINE the line it was at.
fn site_name(name: &crate::python::PyName) -> String {
    if name.filename.is_empty() {
        return name.qualname.clone();
    }
    let file = module_path(&name.filename);
    format!("{} ({file}:{})", name.qualname, name.line)
}

/// A native caller's site: `function+0xOFF (module)`, else `module+0xOFF`, else the address.
fn native_name(images: &mut Images, pid: u32, ns: u64, address: u64) -> String {
    match images.code_at(pid, ns, address) {
        None => format!("{address:#x}"),
        Some(code) => match &code.function {
            Some((name, offset)) => format!(
                "{}+{offset:#x} ({})",
                crate::demangle::demangle(name),
                code.module
            ),
            None => code.in_module(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_are_ranked_by_time_then_count_with_shares() {
        let mut sites = CallSites::default();
        let a = sites.intern("a (x.py:3)".into());
        let b = sites.intern("b (x.py:9)".into());
        sites.tallies.insert(
            (0, a),
            Tally {
                count: 300,
                total_ns: 300,
            },
        );
        sites.tallies.insert(
            (0, b),
            Tally {
                count: 100,
                total_ns: 900,
            },
        );
        sites.tallies.insert(
            (1, a),
            Tally {
                count: 1,
                total_ns: 0,
            },
        );
        let top = sites.of_probe(0);
        assert_eq!(top.len(), 2);
        assert_eq!(
            (top[0].site.as_str(), top[0].count, top[0].share),
            ("b (x.py:9)", 100, 0.75)
        );
        assert_eq!(
            (top[1].site.as_str(), top[1].count, top[1].share),
            ("a (x.py:3)", 300, 0.25)
        );
        // No time: shares of the calls.
        assert_eq!(sites.of_probe(1)[0].share, 1.0);
    }

    #[test]
    fn a_span_takes_its_own_call_and_ends_those_opened_inside_it() {
        let mut sites = CallSites::default();
        let s = sites.intern("s".into());
        let open = sites.open.entry(7).or_default();
        for (start_ns, depth) in [(10, 0), (20, 1), (30, 2)] {
            open.push(Open {
                start_ns,
                depth,
                key: (0, s),
            });
        }
        assert_eq!(sites.span(7, 20, 5, None), Some("s"));
        assert_eq!(sites.open[&7].len(), 1);
        assert_eq!(sites.span(7, 30, 5, None), None);
        assert_eq!(sites.span(8, 10, 5, None), None);
        assert_eq!(sites.tallies[&(0, s)].total_ns, 5);
    }

    #[test]
    fn a_usdt_stack_goes_to_the_next_hit_of_its_probe_and_a_span_takes_its_time() {
        let mut sites = CallSites::default();
        let a = sites.intern("a (x.py:3)".into());
        // Instant probe 4: the stack sent before the hit is counted under the probe.
        sites.usdt_next.insert(7, (4, a));
        assert_eq!(sites.usdt_hit(7, 4, None, 100), Some("a (x.py:3)"));
        // A hit with no stack before it (its stack was lost) takes none.
        assert_eq!(sites.usdt_hit(7, 4, None, 110), None);
        // A stack of another probe is not this hit's.
        sites.usdt_next.insert(7, (5, a));
        assert_eq!(sites.usdt_hit(7, 4, None, 120), None);
        // Begin probe 5 of span 6: counted under the span, its time added when it closes.
        sites.usdt_next.insert(7, (5, a));
        assert_eq!(sites.usdt_hit(7, 5, Some(6), 200), Some("a (x.py:3)"));
        assert_eq!(sites.usdt_closed(7, 6, 200, 50), Some("a (x.py:3)"));
        assert_eq!(sites.usdt_closed(7, 6, 200, 50), None, "closed once");
        assert_eq!(
            sites.tallies[&(4, a)],
            Tally {
                count: 1,
                total_ns: 0
            }
        );
        assert_eq!(
            sites.tallies[&(6, a)],
            Tally {
                count: 1,
                total_ns: 50
            }
        );
        assert!(!sites.tallies.contains_key(&(5, a)));
    }
}
