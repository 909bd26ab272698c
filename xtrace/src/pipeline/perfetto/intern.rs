//! Interning per packet sequence: each name gets a small id (iid) the first time it is used, and
//! is sent once, in the `InternedData` of the packet that first uses it; later packets carry
//! only the iid. Captured values become debug annotations whose names are interned too.
use super::fast_hash::FastMap;
use super::proto::{DebugAnnotation, InternedName, Value};

/// The iids of one kind of interned name (event names, categories, annotation names).
#[derive(Default)]
pub struct Interner {
    ids: FastMap<Box<str>, u64>,
    /// By iid - 1.
    names: Vec<Box<str>>,
}

impl Interner {
    /// The iid of `name`; a new one is added to `new`, to be sent with the packet that uses it.
    /// Iids start at 1 (0 reads as "none").
    pub fn iid(&mut self, name: &str, new: &mut Vec<InternedName>) -> u64 {
        if let Some(&iid) = self.ids.get(name) {
            return iid;
        }
        self.names.push(name.into());
        let iid = self.names.len() as u64;
        self.ids.insert(name.into(), iid);
        new.push(InternedName {
            iid: Some(iid),
            name: Some(name.into()),
        });
        iid
    }

    /// The name of an iid this interner gave.
    pub fn name(&self, iid: u64) -> &str {
        iid.checked_sub(1)
            .and_then(|i| self.names.get(i as usize))
            .map_or("", |n| n)
    }
}

/// The captured values of an event (trace.json `args` members, `"arg0":1,"ret":"0x10"`, with or
/// without a leading comma) as debug annotations, their names interned through `names`. Values
/// that are not JSON members (never expected) become one string annotation `args`.
pub fn annotations(values: &str, names: &mut Interner, new: &mut Vec<InternedName>) -> Vec<DebugAnnotation> {
    let members = values.trim_start_matches(',');
    if members.is_empty() {
        return Vec::new();
    }
    let parsed: serde_json::Result<serde_json::Map<String, serde_json::Value>> =
        serde_json::from_str(&format!("{{{members}}}"));
    let Ok(map) = parsed else {
        return vec![DebugAnnotation {
            name_iid: Some(names.iid("args", new)),
            value: Some(Value::String(members.into())),
            ..Default::default()
        }];
    };
    map.into_iter()
        .map(|(name, value)| DebugAnnotation {
            name_iid: Some(names.iid(&name, new)),
            ..annotation(value)
        })
        .collect()
}

/// One JSON value as an unnamed annotation: objects as dictionaries (entries named in place),
/// arrays as arrays, null as an annotation without a value.
fn annotation(value: serde_json::Value) -> DebugAnnotation {
    use serde_json::Value as J;
    let scalar = |value| DebugAnnotation {
        value: Some(value),
        ..Default::default()
    };
    match value {
        J::Null => DebugAnnotation::default(),
        J::Bool(b) => scalar(Value::Bool(b)),
        J::Number(n) => scalar(match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::Uint(u),
            _ => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
        }),
        J::String(s) => scalar(Value::String(s)),
        J::Array(items) => DebugAnnotation {
            array_values: items.into_iter().map(annotation).collect(),
            ..Default::default()
        },
        J::Object(members) => DebugAnnotation {
            dict_entries: members
                .into_iter()
                .map(|(name, value)| DebugAnnotation {
                    name: Some(name),
                    ..annotation(value)
                })
                .collect(),
            ..Default::default()
        },
    }
}

/// The JSON value of an annotation: the inverse of [`annotation`], so that a span's arguments
/// read back from a Perfetto trace are those trace.json holds.
pub fn json_value(a: &DebugAnnotation) -> serde_json::Value {
    use serde_json::Value as J;
    if !a.dict_entries.is_empty() {
        let members = a
            .dict_entries
            .iter()
            .map(|e| (e.name.clone().unwrap_or_default(), json_value(e)));
        return J::Object(members.collect());
    }
    if !a.array_values.is_empty() {
        return J::Array(a.array_values.iter().map(json_value).collect());
    }
    match &a.value {
        None => J::Null,
        Some(Value::Bool(b)) => J::Bool(*b),
        Some(Value::Uint(u)) => J::from(*u),
        Some(Value::Int(i)) => J::from(*i),
        Some(Value::Double(d)) => serde_json::Number::from_f64(*d).map_or(J::Null, J::Number),
        Some(Value::String(s)) => J::String(s.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interns_each_name_once_from_one() {
        let mut names = Interner::default();
        let mut new = Vec::new();
        assert_eq!(names.iid("work", &mut new), 1);
        assert_eq!(names.iid("inner", &mut new), 2);
        assert_eq!(names.iid("work", &mut new), 1);
        let sent: Vec<_> = new.iter().map(|n| (n.iid, n.name.as_deref())).collect();
        assert_eq!(sent, [(Some(1), Some("work")), (Some(2), Some("inner"))]);
        assert_eq!(names.name(2), "inner");
        assert_eq!(names.name(0), "");
        assert_eq!(names.name(3), "");
    }

    #[test]
    fn values_become_named_annotations() {
        let mut names = Interner::default();
        let mut new = Vec::new();
        let got = annotations(
            r#","arg0":-1,"ret":"0x10","big":18446744073709551615,"f":0.5,"s":{"a":1},"l":[true],"n":null"#,
            &mut names,
            &mut new,
        );
        let by_name: std::collections::HashMap<&str, &DebugAnnotation> =
            got.iter().map(|a| (names.name(a.name_iid.unwrap()), a)).collect();
        assert_eq!(by_name["arg0"].value, Some(Value::Int(-1)));
        assert_eq!(by_name["ret"].value, Some(Value::String("0x10".into())));
        assert_eq!(by_name["big"].value, Some(Value::Uint(u64::MAX)));
        assert_eq!(by_name["f"].value, Some(Value::Double(0.5)));
        assert_eq!(by_name["s"].dict_entries[0].name.as_deref(), Some("a"));
        assert_eq!(by_name["s"].dict_entries[0].value, Some(Value::Int(1)));
        assert_eq!(by_name["l"].array_values[0].value, Some(Value::Bool(true)));
        assert_eq!(by_name["n"].value, None);
        assert_eq!(new.len(), 7);
        assert!(annotations("", &mut names, &mut new).is_empty());
        let back: serde_json::Map<String, serde_json::Value> = got
            .iter()
            .map(|a| (names.name(a.name_iid.unwrap()).to_string(), json_value(a)))
            .collect();
        let written =
            r#"{"arg0":-1,"ret":"0x10","big":18446744073709551615,"f":0.5,"s":{"a":1},"l":[true],"n":null}"#;
        assert_eq!(
            serde_json::Value::Object(back),
            serde_json::from_str::<serde_json::Value>(written).unwrap()
        );
        let odd = annotations("not json", &mut names, &mut new);
        assert_eq!(odd[0].value, Some(Value::String("not json".into())));
    }
}
