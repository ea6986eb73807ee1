//! Inventory bodies turned into records, with Placement's defaults.

use crate::db::inventories::Inventory;
use serde_json::{Map, Value};

/// An inventory record from a validated body, with Placement's defaults.
pub fn inventory_from(v: &Value) -> Inventory {
    let int = |k: &str, d: i64| v.get(k).and_then(Value::as_i64).unwrap_or(d) as i32;
    Inventory {
        total: int("total", 0),
        reserved: int("reserved", 0),
        min_unit: int("min_unit", 1),
        max_unit: int("max_unit", 2147483647),
        step_size: int("step_size", 1),
        allocation_ratio: v
            .get("allocation_ratio")
            .and_then(Value::as_f64)
            .unwrap_or(1.0),
    }
}

/// Every `class: record` of an `inventories` object, in body order.
pub fn records(wanted: &Map<String, Value>) -> Vec<(String, Inventory)> {
    wanted
        .iter()
        .map(|(rc, v)| (rc.clone(), inventory_from(v)))
        .collect()
}
