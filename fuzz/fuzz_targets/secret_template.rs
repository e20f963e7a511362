//! Secret references from StorageClass parameters with `${...}` templates.
//!
//! Properties: a resolved reference has a DNS-1123 subdomain name and a DNS-1123 label
//! namespace; it is exactly the template expanded with the documented tokens (`${pv.name}` and
//! `${pvc.namespace}` everywhere, `${pvc.name}` and `${pvc.annotations['KEY']}` in names only);
//! a template using any other token never resolves.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};
use csi_provisioner_fuzz::{is_label, is_subdomain, name, word};
use libfuzzer_sys::fuzz_target;
use provisioning::secrets::template::expand;
use provisioning::secrets::{SecretKind, TemplateClaim, secret_reference};
use provisioning::validation::{is_dns1123_label, is_dns1123_subdomain};

const TEMPLATES: &[&str] = &[
    "${pv.name}",
    "${pvc.name}",
    "${pvc.namespace}",
    "${pvc.annotations['team']}",
    "${pvc.annotations['a/b']}",
    "${pvc.annotations['']}",
    "${pvc.annotations}",
    "$pvc",
    "${pv.namespace}",
    "${}",
    "${",
    "$$",
    "x-${pv.name}",
    "secret",
    "kube-system",
];

#[derive(Debug)]
struct Input {
    kind: SecretKind,
    params: BTreeMap<String, String>,
    pv_name: String,
    claim: Option<(String, String, Option<BTreeMap<String, String>>)>,
}

fn template(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    let parts = u.int_in_range(0..=3)?;
    let mut s = String::new();
    for _ in 0..parts {
        if u.ratio(1, 2)? {
            s.push_str(&word(u, TEMPLATES)?);
        } else {
            s.push_str(&name(u)?);
        }
    }
    Ok(s)
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let kind = *u.choose(&SecretKind::ALL)?;
        let mut keys: Vec<&str> = vec![
            provisioning::names::PARAM_DEFAULT_SECRET_NAME,
            provisioning::names::PARAM_DEFAULT_SECRET_NAMESPACE,
        ];
        for k in SecretKind::ALL {
            keys.push(k.name_key());
            keys.push(k.namespace_key());
            if let Some((n, ns)) = k.deprecated_keys() {
                keys.push(n);
                keys.push(ns);
            }
        }
        let mut params = BTreeMap::new();
        for _ in 0..u.int_in_range(0..=6)? {
            params.insert(word(u, &keys)?, template(u)?);
        }
        let claim = if u.ratio(4, 5)? {
            let annotations = if u.ratio(4, 5)? {
                let mut a = BTreeMap::new();
                for _ in 0..u.int_in_range(0..=3)? {
                    a.insert(word(u, &["team", "a/b", ""])?, name(u)?);
                }
                Some(a)
            } else {
                None
            };
            Some((name(u)?, name(u)?, annotations))
        } else {
            None
        };
        Ok(Input {
            kind,
            params,
            pv_name: name(u)?,
            claim,
        })
    }
}

/// The template expanded with the documented tokens, or `None` if it names any other token or
/// one without a value.
fn expected(
    template: &str,
    pv_name: &str,
    claim: Option<&TemplateClaim<'_>>,
    is_name: bool,
) -> Option<String> {
    let mut ok = true;
    let out = expand(template, |token| {
        let value = match token {
            "pv.name" => Some(pv_name.to_string()),
            "pvc.namespace" => claim.map(|c| c.namespace.to_string()),
            "pvc.name" if is_name => claim.map(|c| c.name.to_string()),
            _ if is_name => token
                .strip_prefix("pvc.annotations['")
                .and_then(|t| t.strip_suffix("']"))
                .and_then(|key| claim?.annotations?.get(key).cloned()),
            _ => None,
        };
        value.unwrap_or_else(|| {
            ok = false;
            String::new()
        })
    });
    ok.then_some(out)
}

fuzz_target!(|input: Input| {
    let claim = input.claim.as_ref().map(|(n, ns, a)| TemplateClaim {
        name: n,
        namespace: ns,
        annotations: a.as_ref(),
    });
    let Ok(Some(reference)) =
        secret_reference(input.kind, &input.params, &input.pv_name, claim.as_ref())
    else {
        return;
    };
    assert!(is_dns1123_subdomain(&reference.name) && is_subdomain(&reference.name));
    assert!(is_dns1123_label(&reference.namespace) && is_label(&reference.namespace));

    // Which templates were used: the kind's own keys win over the default pair.
    let own: Vec<&str> = [
        Some(input.kind.name_key()),
        input.kind.deprecated_keys().map(|k| k.0),
    ]
    .into_iter()
    .flatten()
    .collect();
    let (name_key, namespace_key) = if own.iter().any(|k| input.params.contains_key(*k)) {
        let pick = |keys: [Option<&'static str>; 2]| {
            keys.into_iter()
                .flatten()
                .find(|k| input.params.contains_key(*k))
                .expect("a resolved kind has both keys")
        };
        (
            pick([
                Some(input.kind.name_key()),
                input.kind.deprecated_keys().map(|k| k.0),
            ]),
            pick([
                Some(input.kind.namespace_key()),
                input.kind.deprecated_keys().map(|k| k.1),
            ]),
        )
    } else {
        (
            provisioning::names::PARAM_DEFAULT_SECRET_NAME,
            provisioning::names::PARAM_DEFAULT_SECRET_NAMESPACE,
        )
    };
    let name_template = &input.params[name_key];
    let namespace_template = &input.params[namespace_key];
    assert_eq!(
        expected(name_template, &input.pv_name, claim.as_ref(), true).as_deref(),
        Some(reference.name.as_str()),
        "name template {name_template:?}"
    );
    assert_eq!(
        expected(namespace_template, &input.pv_name, claim.as_ref(), false).as_deref(),
        Some(reference.namespace.as_str()),
        "namespace template {namespace_template:?}"
    );
});
