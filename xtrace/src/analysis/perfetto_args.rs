//! The names and annotations of a Perfetto trace's events as [`super::perfetto_file`] gives them:
//! an iid looked up in its sequence's interned table, and an event's debug annotations as the
//! JSON object trace.json's `args` holds, with a nested slice's `depth` annotation apart.
use crate::pipeline::perfetto::{
    fast_hash::FastMap,
    intern::json_value,
    proto::{TrackEvent, Value},
    writer::DEPTH,
};

/// The name interned as `iid` in `table` (`what` names the table in the error).
pub(super) fn interned<'s>(table: &'s FastMap<u64, String>, iid: u64, what: &str) -> Result<&'s str, String> {
    table
        .get(&iid)
        .map(String::as_str)
        .ok_or_else(|| format!("{what} iid {iid} was never interned"))
}

/// An event's annotations as the JSON object trace.json's `args` holds (without `depth`); None
/// when it has none.
pub(super) fn args_of(arg_names: &FastMap<u64, String>, e: &TrackEvent) -> Result<Option<String>, String> {
    args_and_depth(arg_names, e).map(|(args, _)| args)
}

/// [`args_of`], and the `depth` annotation apart.
pub(super) fn args_and_depth(
    arg_names: &FastMap<u64, String>,
    e: &TrackEvent,
) -> Result<(Option<String>, Option<u32>), String> {
    let mut object = serde_json::Map::new();
    let mut depth = None;
    for a in &e.debug_annotations {
        let name = match (a.name_iid, &a.name) {
            (Some(iid), _) => interned(arg_names, iid, "annotation name")?,
            (None, name) => name.as_deref().unwrap_or_default(),
        };
        match (name, &a.value) {
            (DEPTH, Some(Value::Uint(d))) => depth = u32::try_from(*d).ok(),
            _ => drop(object.insert(name.to_owned(), json_value(a))),
        }
    }
    let args = (!object.is_empty()).then(|| serde_json::Value::Object(object).to_string());
    Ok((args, depth))
}
