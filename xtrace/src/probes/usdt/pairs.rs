//! Which USDT probes pair into spans: those a `-U PROVIDER:BEGIN..END[|END...]` names, then, among
//! the rest, begin/end probes of one base name by convention (`*_begin`/`*_end`,
//! `*_start`/`*_end`, `*__entry`/`*__return`, and `*_start`/`*_done` as PostgreSQL and MySQL name
//! theirs). Each pair gets a `usdt_span` probe of its own for its spans.
use super::{
    plan::{Role, UsdtProbe},
    spec::UsdtSpec,
};
use crate::probes::{glob, uprobe::Plan, ProbeInfo, ProbeKind};

/// End suffixes, each with the begin suffixes it closes; a double underscore goes first so that
/// `query__done` pairs as `query`, not `query_`.
const END: &[(&str, &[&str])] = &[
    ("__end", &["__begin", "__start"]),
    ("_end", &["_begin", "_start"]),
    ("__return", &["__entry"]),
    ("__done", &["__start"]),
    ("_done", &["_start"]),
];

/// The probes still instants: neither paired nor the tool library's.
fn instants(plan: &Plan) -> Vec<u32> {
    plan.usdt_probes
        .iter()
        .filter(|(_, p)| p.role == Role::Instant)
        .map(|(id, _)| *id)
        .collect()
}

/// The instant named `provider:name` in the file `target`.
fn find(plan: &Plan, among: &[u32], wanted: &str, target: &str) -> Option<u32> {
    among.iter().copied().find(|&id| {
        let probe = &plan.probes[id as usize];
        probe.name == wanted && probe.target == target
    })
}

/// Makes `begin` open and `ends` (with the names their spans record, if any) close spans of a new
/// `usdt_span` probe `name`.
fn pair(plan: &mut Plan, name: String, begin: u32, ends: &[(u32, Option<String>)]) {
    let span = ProbeInfo {
        name,
        kind: ProbeKind::UsdtSpan,
        target: plan.probes[begin as usize].target.clone(),
        offset: plan.probes[begin as usize].offset,
        capture: Default::default(),
    };
    plan.probes.push(span);
    let span = (plan.probes.len() - 1) as u32;
    let mut set = |id: u32, role: Role, end_name: Option<String>| {
        if let Some(p) = plan.usdt_probes.get_mut(&id) {
            *p = UsdtProbe {
                role,
                end_name,
                ..p.clone()
            };
        }
    };
    set(begin, Role::Begin { span }, None);
    for (end, end_name) in ends {
        set(*end, Role::End { span }, end_name.clone());
    }
}

/// Pairs the probes of each `-U PROVIDER:BEGIN..END[|END...]`, per file and provider: its spans
/// are named `provider:` and [`Pairing::span_name`](super::spec::Pairing::span_name). A pairing
/// with several ends has each record its name. A probe paired already stays as it is, and a
/// pairing left with nothing to pair says so in a notice.
pub fn pair_named(plan: &mut Plan, specs: &[UsdtSpec]) {
    for spec in specs {
        let Some(pairing) = &spec.pair else {
            continue;
        };
        let spans = plan.probes.len();
        let instants = instants(plan);
        let begins: Vec<u32> = instants
            .iter()
            .copied()
            .filter(|&id| {
                plan.probes[id as usize]
                    .name
                    .split_once(':')
                    .is_some_and(|(p, n)| n == pairing.begin && glob::matches(&spec.provider, p))
            })
            .collect();
        for begin in begins {
            let probe = &plan.probes[begin as usize];
            let provider = probe.name.split_once(':').map_or("", |(p, _)| p).to_string();
            let target = probe.target.clone();
            let ends: Vec<(u32, Option<String>)> = pairing
                .ends
                .iter()
                .filter_map(|end| {
                    let id = find(plan, &instants, &format!("{provider}:{end}"), &target)?;
                    // Not paired by an earlier pairing of this loop.
                    let free = plan.usdt_probes.get(&id).is_some_and(|p| p.role == Role::Instant);
                    free.then(|| (id, (pairing.ends.len() > 1).then(|| end.clone())))
                })
                .collect();
            if !ends.is_empty() {
                pair(plan, format!("{provider}:{}", pairing.span_name()), begin, &ends);
            }
        }
        if plan.probes.len() == spans {
            plan.notices.push(format!(
                "-U '{}': its probes are paired by an earlier -U already; it adds no spans",
                spec.text
            ));
        }
    }
}

/// Gives begin/end probes of the same base name (same file and provider) that are still
/// instants the roles that pair them, with a `usdt_span` probe for their spans named
/// `provider:base`.
pub fn pair_spans(plan: &mut Plan) {
    let ids = instants(plan);
    let mut pairs: Vec<(u32, u32, String)> = Vec::new();
    for &end_id in &ids {
        let end = &plan.probes[end_id as usize];
        let Some((provider, name)) = end.name.split_once(':') else {
            continue;
        };
        let found = END.iter().find_map(|(suffix, begins)| {
            let base = name.strip_suffix(suffix)?;
            begins.iter().find_map(|begin| {
                let id = find(plan, &ids, &format!("{provider}:{base}{begin}"), &end.target)?;
                Some((id, format!("{provider}:{base}")))
            })
        });
        if let Some((begin_id, span)) = found {
            pairs.push((begin_id, end_id, span));
        }
    }
    pairs.sort_unstable();
    // A begin two conventions close (`x__start` with `x__end` and `x__done`) pairs with the first.
    pairs.dedup_by_key(|(begin_id, _, _)| *begin_id);
    for (begin_id, end_id, span) in pairs {
        pair(plan, span, begin_id, &[(end_id, None)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan with instants `names` (`provider:name`) in `/bin/app`, ids in order.
    fn plan(names: &[&str]) -> Plan {
        let mut plan = Plan::default();
        for (id, name) in names.iter().enumerate() {
            plan.probes.push(ProbeInfo {
                name: name.to_string(),
                kind: ProbeKind::Usdt,
                target: "/bin/app".into(),
                offset: 0x100 * id as u64,
                capture: Default::default(),
            });
            plan.usdt_probes.insert(
                id as u32,
                UsdtProbe {
                    role: Role::Instant,
                    types: vec![],
                    end_name: None,
                },
            );
        }
        plan
    }

    /// Each probe's role and end name, and the span probes' names from id `first_span` on.
    fn paired(plan: &Plan, first_span: usize) -> (Vec<(Role, Option<&str>)>, Vec<&str>) {
        let roles = plan
            .usdt_probes
            .values()
            .map(|p| (p.role, p.end_name.as_deref()))
            .collect();
        let spans = plan.probes[first_span..]
            .iter()
            .inspect(|p| assert_eq!(p.kind, ProbeKind::UsdtSpan))
            .map(|p| p.name.as_str())
            .collect();
        (roles, spans)
    }

    #[test]
    fn conventions_pair_by_base_name() {
        let mut p = plan(&[
            "pg:query__start",
            "pg:query__done",
            "pg:stmt_start",
            "pg:stmt_done",
            "pg:req_begin",
            "pg:req_end",
            "pg:op__entry",
            "pg:op__return",
            "pg:io__start",
            "pg:io__end",
            "pg:lone_done",
            "pg:tick",
        ]);
        pair_spans(&mut p);
        let (roles, spans) = paired(&p, 12);
        assert_eq!(
            spans,
            ["pg:query", "pg:stmt", "pg:req", "pg:op", "pg:io"],
            "by begin id; a double underscore is the separator"
        );
        let pair = |b: u32| [(Role::Begin { span: b }, None), (Role::End { span: b }, None)];
        let mut want: Vec<(Role, Option<&str>)> = (12..17).flat_map(pair).collect();
        want.extend([(Role::Instant, None), (Role::Instant, None)]);
        assert_eq!(roles, want);
    }

    #[test]
    fn named_pairings_take_alternative_ends_first() {
        let mut p = plan(&[
            "pg:txn__start",
            "pg:txn__commit",
            "pg:txn__abort",
            "pg:txn__end",
            "other:txn__start",
        ]);
        let spec = UsdtSpec::parse("pg:txn__start..txn__commit|txn__abort").unwrap();
        pair_named(&mut p, &[spec]);
        pair_spans(&mut p);
        let (roles, spans) = paired(&p, 5);
        assert_eq!(spans, ["pg:txn"]);
        assert_eq!(
            roles,
            [
                (Role::Begin { span: 5 }, None),
                (Role::End { span: 5 }, Some("txn__commit")),
                (Role::End { span: 5 }, Some("txn__abort")),
                (Role::Instant, None),
                (Role::Instant, None),
            ],
            "txn__end stays an instant: its begin is paired already; another provider's begin too"
        );
        // One END: no end name; a provider glob pairs within each provider.
        let mut p = plan(&["a:x", "a:y", "b:x", "b:y"]);
        pair_named(&mut p, &[UsdtSpec::parse("*:x..y").unwrap()]);
        let (roles, spans) = paired(&p, 4);
        assert_eq!(spans, ["a:x", "b:x"]);
        assert_eq!(
            roles,
            [
                (Role::Begin { span: 4 }, None),
                (Role::End { span: 4 }, None),
                (Role::Begin { span: 5 }, None),
                (Role::End { span: 5 }, None),
            ]
        );
    }

    /// A pairing whose probes an earlier one took pairs nothing, and says so.
    #[test]
    fn a_pairing_left_with_nothing_says_so() {
        let mut p = plan(&["pg:txn__start", "pg:txn__commit", "pg:txn__abort"]);
        let first = UsdtSpec::parse("pg:txn__start..txn__commit").unwrap();
        let second = UsdtSpec::parse("pg:txn__start..txn__abort").unwrap();
        pair_named(&mut p, &[first, second]);
        assert_eq!(paired(&p, 3).1, ["pg:txn"]);
        assert_eq!(
            p.notices,
            [
                "-U 'pg:txn__start..txn__abort': its probes are paired by an earlier -U already; it adds \
              no spans"
            ]
        );
    }
}
