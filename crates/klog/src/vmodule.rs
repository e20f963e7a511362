//! `--vmodule`: per-file verbosity, with klog's syntax and matching rules.
//!
//! The value is a comma-separated list of `pattern=N`. A pattern is matched against the source
//! file name without its extension (`controller` for `src/controller.rs`), or against the whole
//! path (still without extension) as soon as any pattern contains a `/`. Patterns are globs
//! (`*`, `?`, `[a-z]`, `[^x]`, `\` escapes), like Go's `filepath.Match`. The first matching
//! pattern wins, and a file-level setting can only raise the global `-v`, never lower it.

use thiserror::Error;

/// A `--vmodule` value that failed to parse. The message matches component-base's wording.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VModuleError {
    #[error("{0:?} does not have the pattern=N format")]
    NotPatternEqualsN(String),
    #[error("parsing verbosity in {0:?}: {1} is not a number between 0 and 2147483647")]
    BadLevel(String, String),
}

/// A parsed `--vmodule` setting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VModule {
    rules: Vec<(String, u32)>,
    /// Whether patterns match the full path rather than the file name (some pattern has a `/`).
    full_path: bool,
}

impl VModule {
    /// Parses `pattern=N,pattern=N,...`. Empty items (a trailing comma) are ignored, as klog does.
    pub fn parse(value: &str) -> Result<Self, VModuleError> {
        let mut rules = Vec::new();
        for item in value.split(',').filter(|s| !s.is_empty()) {
            let parts: Vec<&str> = item.split('=').collect();
            let [pattern, level] = parts.as_slice() else {
                return Err(VModuleError::NotPatternEqualsN(item.to_string()));
            };
            if pattern.is_empty() || level.is_empty() {
                return Err(VModuleError::NotPatternEqualsN(item.to_string()));
            }
            let parsed = parse_level(level)
                .ok_or_else(|| VModuleError::BadLevel(item.to_string(), (*level).to_string()))?;
            rules.push(((*pattern).to_string(), parsed));
        }
        let full_path = rules.iter().any(|(p, _)| p.contains('/'));
        Ok(Self { rules, full_path })
    }

    /// Whether no rule is configured.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The highest level any rule grants; used for cheap early rejection.
    pub fn max_level(&self) -> u32 {
        self.rules.iter().map(|(_, l)| *l).max().unwrap_or(0)
    }

    /// The level configured for `file` (a path as `file!()` reports it), if any rule matches.
    pub fn level_for(&self, file: &str) -> Option<u32> {
        if self.rules.is_empty() {
            return None;
        }
        let path = file.replace('\\', "/");
        let without_ext = path.strip_suffix(".rs").unwrap_or(&path);
        let subject = if self.full_path {
            without_ext
        } else {
            without_ext.rsplit('/').next().unwrap_or(without_ext)
        };
        self.rules
            .iter()
            .find(|(pattern, _)| glob_match(pattern, subject))
            .map(|(_, level)| *level)
    }
}

/// Go's `strconv.ParseUint(s, 10, 31)`: decimal digits only, at most 2^31-1.
fn parse_level(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u32>().ok().filter(|v| *v <= i32::MAX as u32)
}

/// Glob matching with `filepath.Match` semantics on `/`-separated paths. A malformed pattern
/// (an unterminated class) matches nothing, as Go reports it as an error and klog skips it.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    matches_from(&p, &n)
}

fn matches_from(p: &[char], n: &[char]) -> bool {
    match p.first() {
        None => n.is_empty(),
        Some('*') => {
            let rest = &p[1..];
            // `*` never crosses a separator.
            for i in 0..=n.len() {
                if matches_from(rest, &n[i..]) {
                    return true;
                }
                if i < n.len() && n[i] == '/' {
                    break;
                }
            }
            false
        }
        Some(_) => {
            let Some((&c, tail)) = n.split_first() else {
                return false;
            };
            match match_one(p, c) {
                Some((true, used)) => matches_from(&p[used..], tail),
                _ => false,
            }
        }
    }
}

/// Matches one pattern element against `c`; returns whether it matched and how many pattern
/// characters the element used, or `None` for a malformed element.
fn match_one(p: &[char], c: char) -> Option<(bool, usize)> {
    match p[0] {
        '?' => Some((c != '/', 1)),
        '\\' => p.get(1).map(|&e| (e == c, 2)),
        '[' => match_class(p, c),
        lit => Some((lit == c, 1)),
    }
}

fn match_class(p: &[char], c: char) -> Option<(bool, usize)> {
    let mut i = 1;
    let negated = p.get(i) == Some(&'^');
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut ranges = 0;
    loop {
        if p.get(i) == Some(&']') && ranges > 0 {
            i += 1;
            break;
        }
        let (lo, next) = class_char(p, i)?;
        let (hi, next) = if p.get(next) == Some(&'-') {
            class_char(p, next + 1)?
        } else {
            (lo, next)
        };
        if lo <= c && c <= hi {
            matched = true;
        }
        ranges += 1;
        i = next;
    }
    Some((matched != negated, i))
}

/// One class character; an unescaped `-` or `]` here is a malformed pattern in Go.
fn class_char(p: &[char], i: usize) -> Option<(char, usize)> {
    match *p.get(i)? {
        '\\' => p.get(i + 1).map(|&c| (c, i + 2)),
        '-' | ']' => None,
        c => Some((c, i + 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("", vec![])]
    #[case("controller=5", vec![("controller", 5)])]
    #[case("a=1,b*=2,", vec![("a", 1), ("b*", 2)])]
    #[case("x=2147483647", vec![("x", 2147483647)])]
    fn parses(#[case] input: &str, #[case] want: Vec<(&str, u32)>) {
        let got = VModule::parse(input).unwrap();
        let want: Vec<(String, u32)> = want.into_iter().map(|(p, l)| (p.to_string(), l)).collect();
        assert_eq!(got.rules, want);
    }

    #[rstest]
    #[case("controller", r#""controller" does not have the pattern=N format"#)]
    #[case("=3", r#""=3" does not have the pattern=N format"#)]
    #[case("a=", r#""a=" does not have the pattern=N format"#)]
    #[case("a=1=2", r#""a=1=2" does not have the pattern=N format"#)]
    #[case(
        "a=x",
        r#"parsing verbosity in "a=x": x is not a number between 0 and 2147483647"#
    )]
    #[case(
        "a=-1",
        r#"parsing verbosity in "a=-1": -1 is not a number between 0 and 2147483647"#
    )]
    #[case(
        "a=+1",
        r#"parsing verbosity in "a=+1": +1 is not a number between 0 and 2147483647"#
    )]
    #[case("a=2147483648", r#"parsing verbosity in "a=2147483648": 2147483648 is not a number between 0 and 2147483647"#)]
    fn rejects(#[case] input: &str, #[case] message: &str) {
        assert_eq!(VModule::parse(input).unwrap_err().to_string(), message);
    }

    #[rstest]
    #[case("controller=5", "crates/provisioner/src/controller.rs", Some(5))]
    #[case("controller=5", "crates/provisioner/src/controller/mod.rs", None)]
    #[case("cont*=4", "src/controller.rs", Some(4))]
    #[case("c?ntroller=4", "src/controller.rs", Some(4))]
    #[case("[a-c]ontroller=4", "src/controller.rs", Some(4))]
    #[case("[^c]ontroller=4", "src/controller.rs", None)]
    #[case("first=1,fir*=2", "src/first.rs", Some(1))]
    #[case("src/*=3", "src/lib.rs", Some(3))]
    #[case("src/*=3", "crates/x/src/lib.rs", None)]
    #[case("*/src/*=3", "x/src/lib.rs", Some(3))]
    #[case("*=7", "a/b/c.rs", Some(7))]
    #[case("[a=1", "src/a.rs", None)]
    fn matches_files(#[case] setting: &str, #[case] file: &str, #[case] want: Option<u32>) {
        assert_eq!(VModule::parse(setting).unwrap().level_for(file), want);
    }

    #[test]
    fn max_level_is_the_highest_rule() {
        assert_eq!(VModule::parse("a=2,b=9,c=4").unwrap().max_level(), 9);
        assert_eq!(VModule::default().max_level(), 0);
    }

    #[rstest]
    #[case("abc", "abc", true)]
    #[case("a*", "a/b", false)]
    #[case("a?c", "a/c", false)]
    #[case(r"a\*", "a*", true)]
    #[case(r"a\*", "ab", false)]
    #[case(r"[\]a]", "]", true)]
    #[case("[]a]", "]", false)]
    #[case("[a-]", "-", false)]
    #[case("[a-c]", "b", true)]
    #[case("*", "", true)]
    fn glob(#[case] pattern: &str, #[case] name: &str, #[case] want: bool) {
        assert_eq!(glob_match(pattern, name), want);
    }

    proptest::proptest! {
        #[test]
        fn parse_and_match_never_panic(setting in ".{0,40}", file in ".{0,40}") {
            if let Ok(v) = VModule::parse(&setting) {
                let _ = v.level_for(&file);
            }
        }
    }
}
