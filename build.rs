//! Rebuilds the crate when a migration is added or changed: `sqlx::migrate!`
//! embeds the files at compile time, and without this cargo does not know
//! it depends on them (a new migration was missing from the next build).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
