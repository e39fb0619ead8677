//! ID token validation against real signatures (ES256 keys made by rcgen,
//! tokens signed by jsonwebtoken) and the claim mapping.
use base64::Engine;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;

use super::*;
use crate::oidc::{OidcConfig, Secret, parse_role_map, pkce_challenge};

const ISS: &str = "https://sso.example.org/realms/hpc";
const CLIENT: &str = "benchlake-dashboard";
const NONCE: &str = "n-0123456789abcdef";

struct Key {
    enc: EncodingKey,
    jwk: Jwk,
}

fn key(kid: &str) -> Key {
    let kp = rcgen::KeyPair::generate().expect("P-256 key");
    let raw = kp.public_key_raw();
    assert_eq!(raw.len(), 65, "uncompressed P-256 point");
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let jwk: Jwk = serde_json::from_value(json!({
        "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
        "x": b64(&raw[1..33]), "y": b64(&raw[33..65]),
    }))
    .expect("JWK");
    Key {
        enc: EncodingKey::from_ec_der(&kp.serialize_der()),
        jwk,
    }
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn claims() -> serde_json::Value {
    json!({
        "iss": ISS, "aud": CLIENT, "sub": "f3c1-alice", "iat": now(), "exp": now() + 300,
        "nonce": NONCE, "preferred_username": "alice", "groups": ["bench-admins", "staff"],
    })
}

fn sign(k: &Key, kid: &str, c: &serde_json::Value) -> String {
    let mut h = Header::new(Algorithm::ES256);
    h.kid = Some(kid.into());
    jsonwebtoken::encode(&h, c, &k.enc).expect("sign")
}

fn expect() -> Expect<'static> {
    Expect {
        issuer: ISS,
        client_id: CLIENT,
        nonce: NONCE,
    }
}

fn check(token: &str, keys: &[Jwk]) -> Result<Map<String, Value>, TokenError> {
    validate_id_token(token, keys, &expect())
}

fn with(f: impl FnOnce(&mut serde_json::Value)) -> serde_json::Value {
    let mut c = claims();
    f(&mut c);
    c
}

#[test]
fn a_good_token_gives_its_claims() {
    let k = key("k1");
    let other = key("k2");
    let t = sign(&k, "k1", &claims());
    let c = check(&t, &[other.jwk.clone(), k.jwk.clone()]).expect("valid");
    assert_eq!(c["sub"], "f3c1-alice");
    assert_eq!(c["groups"], json!(["bench-admins", "staff"]));
    // Several audiences: azp must name this client.
    let t = sign(
        &k,
        "k1",
        &with(|c| {
            c["aud"] = json!([CLIENT, "other"]);
            c["azp"] = json!(CLIENT);
        }),
    );
    assert!(check(&t, std::slice::from_ref(&k.jwk)).is_ok());
}

#[test]
fn wrong_issuer_audience_expiry_and_nonce_are_refused() {
    let k = key("k1");
    let keys = [k.jwk.clone()];
    let cases: Vec<(serde_json::Value, TokenError)> = vec![
        (
            with(|c| c["iss"] = json!("https://evil.example.org/realms/hpc")),
            TokenError::Issuer(ISS.into()),
        ),
        (
            with(|c| c["aud"] = json!("another-client")),
            TokenError::Audience(CLIENT.into()),
        ),
        (
            with(|c| {
                c["aud"] = json!([CLIENT, "other"]);
                c["azp"] = json!("other");
            }),
            TokenError::Audience(format!(
                "{CLIENT} among several audiences without azp naming it"
            )),
        ),
        (
            with(|c| {
                c["iat"] = json!(now() - 7200);
                c["exp"] = json!(now() - 3600);
            }),
            TokenError::Expired,
        ),
        (
            with(|c| c["nbf"] = json!(now() + 3600)),
            TokenError::NotYetValid,
        ),
        (
            with(|c| c["iat"] = json!(now() + 3600)),
            TokenError::NotYetValid,
        ),
        (
            with(|c| c["nonce"] = json!("n-replayed-from-elsewhere")),
            TokenError::Nonce,
        ),
        (
            with(|c| {
                c.as_object_mut().unwrap().remove("nonce");
            }),
            TokenError::Missing("nonce".into()),
        ),
        (
            with(|c| {
                c.as_object_mut().unwrap().remove("exp");
            }),
            TokenError::Missing("exp".into()),
        ),
    ];
    for (c, want) in cases {
        let t = sign(&k, "k1", &c);
        assert_eq!(check(&t, &keys), Err(want.clone()), "{c}");
    }
    // Within the leeway an expired token still passes.
    let t = sign(&k, "k1", &with(|c| c["exp"] = json!(now() - 10)));
    assert!(check(&t, &keys).is_ok());
}

#[test]
fn bad_signatures_unknown_keys_and_weak_algorithms_are_refused() {
    let k = key("k1");
    let keys = [k.jwk.clone()];
    // Signed by another key under the provider's kid.
    let forger = key("k1");
    let t = sign(&forger, "k1", &claims());
    assert_eq!(check(&t, &keys), Err(TokenError::Signature));
    // A payload changed after signing.
    let t = sign(&k, "k1", &claims());
    let parts: Vec<&str> = t.split('.').collect();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let forged =
        b64.encode(serde_json::to_vec(&with(|c| c["groups"] = json!(["bench-admins"]))).unwrap());
    let t2 = format!("{}.{forged}.{}", parts[0], parts[2]);
    assert_eq!(check(&t2, &keys), Err(TokenError::Signature));
    // A key the JWKS does not hold (the caller fetches the keys again).
    let t = sign(&k, "rotated", &claims());
    assert_eq!(
        check(&t, &keys),
        Err(TokenError::UnknownKey("rotated".into()))
    );
    // HS256 with a shared secret (e.g. the client secret) and alg none.
    let mut h = Header::new(Algorithm::HS256);
    h.kid = Some("k1".into());
    let t =
        jsonwebtoken::encode(&h, &claims(), &EncodingKey::from_secret(b"client-secret")).unwrap();
    assert_eq!(check(&t, &keys), Err(TokenError::Algorithm("HS256".into())));
    let none = format!(
        "{}.{}.",
        b64.encode(br#"{"alg":"none","kid":"k1"}"#),
        b64.encode(serde_json::to_vec(&claims()).unwrap())
    );
    assert!(
        matches!(
            check(&none, &keys),
            Err(TokenError::Malformed(_) | TokenError::Algorithm(_))
        ),
        "{:?}",
        check(&none, &keys)
    );
    assert!(matches!(
        check("not.a.jwt", &keys),
        Err(TokenError::Malformed(_))
    ));
    // An encryption key is never used to verify.
    let mut enc = k.jwk.clone();
    enc.common.public_key_use = Some(PublicKeyUse::Encryption);
    let t = sign(&k, "k1", &claims());
    assert_eq!(check(&t, &[enc]), Err(TokenError::UnknownKey("k1".into())));
}

fn mapping() -> ClaimMapping {
    ClaimMapping {
        roles_claim: "groups".into(),
        role_map: parse_role_map(&["bench-admins=admin".into(), "staff=user".into()]).unwrap(),
        name_claim: "preferred_username".into(),
    }
}

fn obj(v: serde_json::Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[test]
fn claims_map_to_the_most_privileged_role() {
    let m = mapping();
    let alice = obj(json!({"preferred_username": "alice", "groups": ["staff", "bench-admins"]}));
    assert_eq!(
        map_claims(&m, &alice),
        Ok(Mapped {
            name: "alice".into(),
            role: Role::Admin
        })
    );
    let bob = obj(json!({"preferred_username": "bob", "groups": "staff"}));
    assert_eq!(map_claims(&m, &bob).map(|x| x.role), Ok(Role::User));
    let carol = obj(json!({"preferred_username": "carol", "groups": ["visitors"]}));
    let e = map_claims(&m, &carol).unwrap_err();
    assert_eq!(
        e,
        MapError::NoRole {
            name: "carol".into(),
            claim: "groups".into(),
            values: vec!["visitors".into()]
        }
    );
    assert_eq!(
        e.to_string(),
        "carol has no benchlake role: the claim 'groups' holds 'visitors', and none of these is given a role here"
    );
    let dave = obj(json!({"preferred_username": "dave"}));
    assert!(
        map_claims(&m, &dave)
            .unwrap_err()
            .to_string()
            .contains("holds nothing")
    );
    // `*`: everyone the provider signs in.
    let mut all = mapping();
    all.role_map = parse_role_map(&["*=user".into(), "bench-admins=admin".into()]).unwrap();
    assert_eq!(map_claims(&all, &dave).map(|x| x.role), Ok(Role::User));
    assert_eq!(map_claims(&all, &alice).map(|x| x.role), Ok(Role::Admin));
}

#[test]
fn nested_and_dotted_claims_and_names() {
    let mut m = mapping();
    m.roles_claim = "realm_access.roles".into();
    let kc = obj(json!({
        "preferred_username": "alice",
        "realm_access": {"roles": ["offline_access", "bench-admins"]},
    }));
    assert_eq!(map_claims(&m, &kc).map(|x| x.role), Ok(Role::Admin));
    m.roles_claim = "https://example.org/groups".into();
    let dotted = obj(json!({"preferred_username": "bob", "https://example.org/groups": ["staff"]}));
    assert_eq!(map_claims(&m, &dotted).map(|x| x.role), Ok(Role::User));
    m.roles_claim = "groups".into();
    m.name_claim = "email".into();
    let mail = obj(json!({"email": "alice@example.org", "groups": ["staff"]}));
    assert_eq!(
        map_claims(&m, &mail).map(|x| x.name),
        Ok("alice@example.org".into())
    );
    let bad = obj(json!({"email": "a b<script>", "groups": ["staff"]}));
    assert!(matches!(
        map_claims(&m, &bad),
        Err(MapError::BadName { .. })
    ));
    let none = obj(json!({"groups": ["staff"]}));
    assert_eq!(map_claims(&m, &none), Err(MapError::NoName("email".into())));
}

#[test]
fn role_map_and_settings_are_checked() {
    assert_eq!(
        parse_role_map(&["a=admin".into(), "b = user".into()]).unwrap(),
        vec![("a".into(), Role::Admin), ("b".into(), Role::User)]
    );
    for bad in ["a=agent", "a=worker", "novalue", "=admin", "a=root"] {
        assert!(parse_role_map(&[bad.into()]).is_err(), "{bad}");
    }
    let ok = OidcConfig {
        issuer: "https://sso.example.org/realms/hpc".into(),
        client_id: CLIENT.into(),
        client_secret: Secret("s".into()),
        redirect_url: "https://bench.example.org/login/oidc/callback".into(),
        scopes: vec!["openid".into(), "profile".into()],
        mapping: mapping(),
        display_name: "Keycloak".into(),
        ca_pem: None,
        timeout: std::time::Duration::from_secs(10),
    };
    assert_eq!(ok.check(), Ok(()));
    assert_eq!(format!("{:?}", ok.client_secret), "Secret(***)");
    let bad = |f: &dyn Fn(&mut OidcConfig)| {
        let mut c = ok.clone();
        f(&mut c);
        c.check().unwrap_err()
    };
    assert!(bad(&|c| c.issuer = "http://sso.example.org/".into()).contains("must be https://"));
    let mut local = ok.clone();
    local.issuer = "http://127.0.0.1:8080".into();
    assert_eq!(local.check(), Ok(()));
    assert!(
        bad(&|c| c.redirect_url = "https://bench.example.org/callback".into())
            .contains("/login/oidc/callback")
    );
    assert!(bad(&|c| c.scopes = vec!["profile".into()]).contains("openid"));
    assert!(bad(&|c| c.client_secret = Secret(String::new())).contains("secret"));
    assert!(bad(&|c| c.mapping.role_map.clear()).contains("oidc-role-map"));
}

#[test]
fn pkce_challenge_is_rfc7636_s256() {
    // RFC 7636, appendix B.
    assert_eq!(
        pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    );
}

#[test]
fn a_signed_in_name_is_the_same_owner_as_a_token_bound_to_it() {
    let who = crate::oidc::identity_of(
        ISS,
        "f3c1-alice",
        Mapped {
            name: "alice".into(),
            role: Role::User,
        },
    );
    let tokens = crate::config::Tokens {
        user: vec!["alice:alice-user-token-0123456789".into()],
        ..Default::default()
    };
    let bound = tokens.identify("alice-user-token-0123456789").unwrap();
    assert_eq!(who.principal(), Some("alice".into()));
    assert_eq!(who.principal(), bound.principal());
    assert!(crate::access::require_owner(&who, Some("alice"), "run r").is_ok());
    assert!(crate::access::require_owner(&who, Some("bob"), "run r").is_err());
    // The credential names issuer and subject, never a token.
    assert_eq!(
        who.credential,
        crate::config::fingerprint(&format!("oidc {ISS} f3c1-alice"))
    );
}
