//! One probe family's planning behind one trait: each family (functions, USDT, CUDA, ranges)
//! turns what the user asked of it into probes in the one [`Plan`] of a recording, for the
//! resolved targets, reading each file once through the shared [`SymbolCache`]. The session runs
//! the families' planners in order (functions first: an exact name's value types win over a
//! glob's, and the probe ids of functions come first); what a family's records become and what
//! it adds to the summary are the pipeline's `Family` side of the same slice.
use super::{
    elf::SymbolCache,
    uprobe::{Plan, Scope},
};
use crate::error::Result;

/// What every planner is given: the resolved targets, one reading of each file, and the bound
/// on traced functions.
pub struct Planning<'a> {
    pub scopes: &'a [Scope<'a>],
    pub elves: &'a mut SymbolCache,
    /// `--max-probes`: planning fails, before anything is attached, when more functions match.
    pub max_probes: usize,
}

impl Planning<'_> {
    /// Whether the recording is system-wide (no target processes).
    pub fn system_wide(&self) -> bool {
        self.scopes.iter().any(|s| matches!(s, Scope::SystemWide))
    }
}

/// One probe family's planning.
pub trait Planner {
    /// Adds the family's probes (and its notices) to `plan`; fails on what the user asked that
    /// cannot be traced, before anything is attached.
    fn plan(&self, plan: &mut Plan, at: &mut Planning<'_>) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::{spec::UprobeSpec, uprobe::Functions, usdt::plan::UsdtPlanner, ProbeKind};

    fn functions(specs: &[&str]) -> Functions {
        let specs: Vec<UprobeSpec> = specs.iter().map(|s| UprobeSpec::parse(s).unwrap()).collect();
        Functions::new(&specs, Default::default(), Default::default())
    }

    #[test]
    fn families_add_to_one_plan_in_turn_and_the_bound_counts_functions_once() {
        let sh = crate::launch::Program::open(std::path::Path::new("/bin/sh")).unwrap();
        let scopes = [Scope::Command(&sh)];
        let mut elves = SymbolCache::default();
        let mut at = Planning {
            scopes: &scopes,
            elves: &mut elves,
            max_probes: 1,
        };
        let mut plan = Plan::default();
        // A glob goes after an exact name, whatever the order given.
        let first = functions(&["libc:getpi?", "libc:strlen"]);
        assert_eq!(first.specs[0].symbol, "strlen");
        assert!(matches!(
            first.plan(&mut plan, &mut at),
            Err(crate::error::Error::TooManyProbes { max: 1, .. })
        ));
        let mut plan = Plan::default();
        for family in [
            &functions(&["libc:strlen"]) as &dyn Planner,
            &UsdtPlanner::new(&[]),
            &functions(&["libc:getpid"]),
        ] {
            family.plan(&mut plan, &mut at).unwrap();
        }
        // The second functions' planning counts its own probe against --max-probes, not the
        // first's, and numbers it after it.
        let planned: Vec<(&str, ProbeKind)> = plan.probes.iter().map(|p| (p.name.as_str(), p.kind)).collect();
        assert_eq!(
            planned,
            [("strlen", ProbeKind::Uprobe), ("getpid", ProbeKind::Uprobe)]
        );
        let ids: Vec<u32> = plan.attachments.iter().map(|a| a.probe_id).collect();
        assert_eq!(ids, [0, 1]);
        assert!(!at.system_wide());
    }
}
