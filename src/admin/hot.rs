//! `GET /hot-objects`: the objects this node's requests named most over
//! the last one to two minutes (each core's space-saving counter), with
//! their type's name, for the console's list of the hottest objects.

use hyper::Response;
use serde_json::Value;

use super::forward::no_cluster;
use super::operator::list_refused;
use super::routes::{json_response, Body};
use super::AdminState;

pub(super) async fn get(state: &AdminState) -> Response<Body> {
    let Some(ops) = &state.ops else {
        return no_cluster();
    };
    match ops.hot_objects().await {
        Ok(mut hot) => {
            if let Some(objects) = hot["objects"].as_array_mut() {
                for object in objects {
                    let type_id = object["type_id"].as_u64();
                    let name = state
                        .metrics
                        .types
                        .iter()
                        .find(|(id, _)| Some(u64::from(*id)) == type_id)
                        .map(|(_, name)| *name);
                    object["type"] = name.map_or(Value::Null, Value::from);
                }
            }
            json_response(hot)
        }
        Err(refusal) => list_refused(refusal),
    }
}
