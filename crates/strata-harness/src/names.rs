//! System names: the one grammar of `--systems` entries and of the
//! `system` labels in `results.json`, and its one parser, used by the
//! registry (to open a system) and by the report (to tell which kind of
//! system a result is).
//!
//! ```text
//! name     := family [ ":" strategy ] [ "[" params "]" [ "@" index ] ]
//! family   := word                      strata, or a peer: rocksdb, sqlite, fjall
//! strategy := word                      next, memory, none, ... (aliases below)
//! params   := [ param ] { ";" [ param ] }
//! param    := key [ "@" index ] "=" value
//! word     := one or more of  A-Z a-z 0-9 _ -
//! ```
//!
//! Spaces around keys, indexes and values are ignored, and so are empty
//! parameters (`[delta=off;]`). A key may be given once per index (and
//! once without one). `key@index=value` applies to index `index` only and
//! overrides a plain `key=value` there; a suffix `[...]@index` gives every
//! parameter of the brackets without its own `@` that index
//! (`strata:next[delta=off]@user_id` is `strata:next[delta@user_id=off]`). Strategy aliases, resolved
//! case-insensitively: `noindex` and `no-index` are `none`, `eager` is
//! `memory` (the Eager baseline), `standalone` is `composite`, `range-filter`
//! is `filter` (Luo & Carey's range filters). The name as
//! written stays the system's label.
//!
//! Examples: `strata:none`, `strata:next`, `strata:next[delta=off]`,
//! `strata:next[delta=off;delta@user_id=100000]`, `strata:eager`,
//! `sqlite`.

/// The family of Strata's own systems.
pub const STRATA: &str = "strata";

/// The strategy name of a Strata system without an index.
pub const NO_INDEX: &str = "none";

/// Strategy aliases: (alias, strategy), compared case-insensitively.
pub const ALIASES: &[(&str, &str)] = &[
    ("noindex", "none"),
    ("no-index", "none"),
    ("eager", "memory"),
    ("standalone", "composite"),
    ("range-filter", "filter"),
    ("ps-tree", "perseid"),
];

/// A parsed system name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemName {
    /// The name as written (the label in results).
    pub text: String,
    /// The part before `:` and `[`: `strata`, `sqlite`, ...
    pub family: String,
    /// The strategy after `:`, aliases resolved; `None` without `:`.
    pub strategy: Option<String>,
    /// The parameters, in the order given.
    pub params: Vec<Param>,
}

/// One `key[@index]=value` parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// Parameter name (before `@` or `=`), trimmed and non-empty.
    pub key: String,
    /// `Some` for `key@index=value`.
    pub index: Option<String>,
    /// Text after `=`, trimmed and non-empty.
    pub value: String,
}

fn is_word(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The strategy `s` names: its alias target, or `s` itself.
pub fn canonical_strategy(s: &str) -> String {
    ALIASES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(s))
        .map_or_else(|| s.to_string(), |(_, target)| target.to_string())
}

impl SystemName {
    /// Parses `text` (see the module documentation). Errors read
    /// `system "<text>": <why>`.
    pub fn parse(text: &str) -> Result<SystemName, String> {
        let bad = |why: String| format!("system {text:?}: {why}");
        let (head, params, scope) = match text.split_once('[') {
            Some((h, p)) => {
                let (p, suffix) = p
                    .rsplit_once(']')
                    .ok_or_else(|| bad("parameters must end with ']'".into()))?;
                let scope = match suffix {
                    "" => None,
                    s => match s.strip_prefix('@') {
                        Some(i) if is_word(i) => Some(i.to_string()),
                        _ => {
                            return Err(bad(format!(
                                "{s:?} after the parameters: expected nothing or @index"
                            )))
                        }
                    },
                };
                (h, Some(p), scope)
            }
            None => (text, None, None),
        };
        let (family, strategy) = match head.split_once(':') {
            Some((f, s)) => (f, Some(s)),
            None => (head, None),
        };
        if !is_word(family) {
            return Err(bad(format!(
                "family {family:?} must be letters, digits, '_' or '-'"
            )));
        }
        if let Some(s) = strategy {
            if !is_word(s) {
                return Err(bad(format!(
                    "strategy {s:?} must be letters, digits, '_' or '-'"
                )));
            }
        }
        let mut out: Vec<Param> = Vec::new();
        for kv in params.unwrap_or("").split(';').map(str::trim) {
            if kv.is_empty() {
                continue;
            }
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(format!("{kv:?} is not key=value")))?;
            let (key, index) = match k.split_once('@') {
                Some((k, i)) => (k.trim(), Some(i.trim().to_string())),
                None => (k.trim(), scope.clone()),
            };
            let v = v.trim();
            if key.is_empty() || v.is_empty() || index.as_deref() == Some("") {
                return Err(bad(format!("{kv:?}: empty key, index or value")));
            }
            if out.iter().any(|p| p.key == key && p.index == index) {
                return Err(bad(format!("parameter {:?} given twice", k.trim())));
            }
            out.push(Param {
                key: key.to_string(),
                index,
                value: v.to_string(),
            });
        }
        let strategy = strategy.map(canonical_strategy);
        if strategy.as_deref() == Some(NO_INDEX) && !out.is_empty() {
            return Err(bad(format!("{family}:none takes no parameters")));
        }
        Ok(SystemName {
            text: text.to_string(),
            family: family.to_string(),
            strategy,
            params: out,
        })
    }

    /// A Strata system (`strata:...`).
    pub fn is_strata(&self) -> bool {
        self.family == STRATA
    }

    /// The value of plain (all-index) parameter `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|p| p.key == key && p.index.is_none())
            .map(|p| p.value.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> SystemName {
        SystemName::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn families_strategies_and_aliases() {
        let n = p("sqlite");
        assert_eq!((n.family.as_str(), n.strategy.as_deref()), ("sqlite", None));
        assert!(!n.is_strata());
        let n = p("strata:next");
        assert!(n.is_strata());
        assert_eq!(n.strategy.as_deref(), Some("next"));
        assert!(n.params.is_empty());
        for (alias, target) in [
            ("strata:noindex", "none"),
            ("strata:no-index", "none"),
            ("strata:Eager", "memory"),
            ("strata:standalone", "composite"),
            ("rocksdb:composite", "composite"),
            ("strata:posting-lazy", "posting-lazy"),
            ("strata:Range-Filter", "filter"),
            ("strata:filter", "filter"),
            ("strata:PS-Tree", "perseid"),
            ("strata:perseid", "perseid"),
        ] {
            let n = p(alias);
            assert_eq!(n.strategy.as_deref(), Some(target), "{alias}");
            assert_eq!(n.text, alias, "the label stays as written");
        }
    }

    #[test]
    fn parameters() {
        let n = p("strata:composite[mode=validation; validate = timestamp]");
        assert_eq!(
            n.params,
            vec![
                Param {
                    key: "mode".into(),
                    index: None,
                    value: "validation".into()
                },
                Param {
                    key: "validate".into(),
                    index: None,
                    value: "timestamp".into()
                }
            ]
        );
        let n = p("strata:next[delta=off;delta@user_id=1000;]");
        assert_eq!(n.params.len(), 2);
        assert_eq!(n.params[1].index.as_deref(), Some("user_id"));
        assert_eq!(n.param("delta"), Some("off"));
        let n = p("strata:next[delta@user_id=off]");
        assert_eq!(n.param("delta"), None, "an index's parameter is not plain");
        assert_eq!(p("strata:next[]").params, vec![]);
        // A scope suffix is the same as @index on each parameter.
        assert_eq!(
            p("strata:next[delta=off;x=1;y@b=2]@user_id").params,
            p("strata:next[delta@user_id=off;x@user_id=1;y@b=2]").params
        );
    }

    #[test]
    fn rejects_malformed_names() {
        for (bad, why) in [
            ("strata:", "strategy \"\""),
            ("strata:next[delta=off", "must end with ']'"),
            ("strata:next[delta=off]x", "expected nothing or @index"),
            ("strata:next[delta=off]@", "expected nothing or @index"),
            ("strata:next@user_id", "strategy \"next@user_id\""),
            ("strata:next[delta=1;delta@a=2]@a", "given twice"),
            ("strata:next[delta]", "is not key=value"),
            ("strata:next[=1]", "empty key"),
            ("strata:next[delta=]", "empty key"),
            ("strata:next[delta@=1]", "empty key"),
            ("strata:next[delta=1;delta=2]", "given twice"),
            ("strata:next[delta@a=1;delta@a=2]", "given twice"),
            ("strata:none[delta=1]", "takes no parameters"),
            ("strata:noindex[delta=1]", "takes no parameters"),
            ("strata:ne xt", "strategy \"ne xt\""),
            ("", "family \"\""),
            ("foo bar", "family \"foo bar\""),
        ] {
            let e = SystemName::parse(bad).expect_err(bad);
            assert!(e.starts_with(&format!("system {bad:?}: ")), "{e}");
            assert!(e.contains(why), "{bad}: {e}");
        }
        // Two keys for different indexes, and plain beside per-index, are fine.
        p("strata:next[delta=off;delta@a=1;delta@b=2]");
    }
}
