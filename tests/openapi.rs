//! The committed OpenAPI document must match what the code generates.
//! Regenerate with `UPDATE_OPENAPI=1 cargo test --test openapi`.

#[test]
fn committed_openapi_is_fresh() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/placement.json");
    let generated = serde_json::to_string_pretty(&placement::api::docs::openapi())
        .expect("serialisable")
        + "\n";
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).expect("write openapi/placement.json");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "openapi/placement.json is stale: run UPDATE_OPENAPI=1 cargo test --test openapi"
    );
    let doc: serde_json::Value = serde_json::from_str(&committed).expect("valid JSON");
    assert!(doc["paths"]["/allocation_candidates"]["get"].is_object());
    assert!(doc["paths"]["/resource_providers/{uuid}/inventories"]["delete"].is_object());
}
