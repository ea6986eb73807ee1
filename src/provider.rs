//! Resource provider rules beyond their SQL, as Placement's provider
//! object enforces them: a name on create, an existing parent that is not
//! the provider itself, no loop, and changing or removing a parent only
//! where the caller's microversion allows it (1.37). Each refusal in
//! Placement's words.

use crate::db::providers::{self, CreateError, DeleteBlock, ProviderRow};
use crate::error::{codes, Error, Result};
use sqlx::PgConnection;
use uuid::Uuid;

/// What an update does to a provider's parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParentChange {
    /// Leave it as it is (the body does not name one).
    Keep,
    /// Make the provider a root.
    Remove,
    /// Give it this parent.
    Set(Uuid),
}

/// Creates a provider; its row.
pub async fn create(
    tx: &mut PgConnection,
    uuid: Uuid,
    name: &str,
    parent: Option<Uuid>,
) -> Result<ProviderRow> {
    let unable = |why: &str| {
        Error::invalid(format!(
            "Unable to create resource provider \"{name}\", {uuid}: {why}"
        ))
    };
    // The schema allows "", Placement's object does not (a rename to ""
    // through PUT is accepted by both).
    if name.is_empty() {
        return Err(unable(
            "Object action create failed because: name is required",
        ));
    }
    let parent = match parent {
        None => None,
        Some(p) if p == uuid => {
            return Err(unable(
                "parent provider UUID cannot be same as UUID. Please modify your request.",
            ))
        }
        Some(p) => match providers::get(tx, p).await? {
            Some(row) => Some((row.id, row.root_provider_id)),
            None => {
                return Err(unable(
                    "Object action create failed because: parent provider UUID does not exist.",
                ))
            }
        },
    };
    match providers::create(tx, uuid, name, parent).await {
        Ok(()) => {}
        Err(CreateError::DuplicateName) => {
            return Err(Error::conflict(format!(
                "Conflicting resource provider name: {name} already exists."
            ))
            .code(codes::DUPLICATE_NAME))
        }
        Err(CreateError::DuplicateUuid) => {
            return Err(Error::conflict(format!(
                "Conflicting resource provider uuid: {uuid} already exists."
            ))
            .code(codes::DUPLICATE_NAME))
        }
        Err(CreateError::Db(e)) => return Err(e.into()),
    }
    providers::get(tx, uuid)
        .await?
        .ok_or_else(|| Error::internal("provider vanished"))
}

/// Renames `rp` (locked by the caller) and changes its parent;
/// `may_reparent` (1.37) allows changing or removing an existing parent.
pub async fn update(
    tx: &mut PgConnection,
    rp: &ProviderRow,
    name: &str,
    change: ParentChange,
    may_reparent: bool,
) -> Result<ProviderRow> {
    let fail = |why: &str| {
        Error::invalid(format!(
            "Unable to save resource provider {}: Object action update failed because: {why}",
            rp.uuid
        ))
    };
    let parent = match change {
        ParentChange::Keep => match rp.parent_uuid {
            Some(p) => providers::get(tx, p)
                .await?
                .map(|r| (r.id, r.root_provider_id)),
            None => None,
        },
        ParentChange::Remove if rp.parent_uuid.is_some() && !may_reparent => {
            return Err(fail("un-parenting a provider is not currently allowed."))
        }
        ParentChange::Remove => None,
        ParentChange::Set(p) => {
            let Some(prow) = providers::get(tx, p).await? else {
                return Err(fail("parent provider UUID does not exist."));
            };
            if rp.parent_uuid.is_some_and(|cur| cur != p) && !may_reparent {
                return Err(fail("re-parenting a provider is not currently allowed."));
            }
            if providers::is_in_subtree(tx, rp.id, prow.id).await? {
                return Err(fail("creating loop in the provider tree is not allowed."));
            }
            Some((prow.id, prow.root_provider_id))
        }
    };
    if !providers::update(tx, rp.id, name, parent).await? {
        return Err(Error::conflict(format!(
            "Conflicting resource provider {name} already exists."
        ))
        .code(codes::DUPLICATE_NAME));
    }
    providers::get(tx, rp.uuid)
        .await?
        .ok_or_else(|| Error::internal("provider vanished"))
}

/// Deletes `rp` (locked by the caller), unless it has children or
/// allocations.
pub async fn delete(tx: &mut PgConnection, rp: &ProviderRow) -> Result<()> {
    match providers::delete(tx, rp.id).await? {
        Some(DeleteBlock::HasChildren) => Err(Error::conflict(format!(
            "Unable to delete parent resource provider {}: It has child resource providers.",
            rp.uuid
        ))
        .code(codes::CANNOT_DELETE_PARENT)),
        Some(DeleteBlock::HasAllocations) => Err(Error::conflict(format!(
            "Unable to delete resource provider {}: Resource provider has allocations.",
            rp.uuid
        ))
        .code(codes::PROVIDER_INUSE)),
        None => Ok(()),
    }
}
