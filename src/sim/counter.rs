//! A minimal object type for router tests and the simulator: an i64 counter.

use wire::ObjectKey;

use crate::config::Persist;
use crate::router::handler::{DecodeError, HandlerOutput, ObjectState, ObjectType};
use crate::router::types::Request;

pub const COUNTER_TYPE_ID: u32 = 1;
/// Answers the counter (i64 LE).
pub const OP_GET: u32 = 1;
/// Adds the i64 LE body; answers the new value; overflow is BAD_REQUEST.
pub const OP_ADD: u32 = 2;

pub struct CounterType {
    pub persist: Persist,
}

impl ObjectType for CounterType {
    fn type_id(&self) -> u32 {
        COUNTER_TYPE_ID
    }

    fn auto_create(&self) -> bool {
        true
    }

    fn persist(&self) -> Persist {
        self.persist
    }

    fn decode(
        &self,
        _key: ObjectKey,
        state: Option<&[u8]>,
    ) -> Result<Box<dyn ObjectState>, DecodeError> {
        let value = match state {
            None => 0,
            Some(bytes) => i64::from_le_bytes(bytes.try_into().map_err(|_| DecodeError)?),
        };
        Ok(Box::new(Counter { value }))
    }
}

struct Counter {
    value: i64,
}

impl ObjectState for Counter {
    fn encode(&self) -> Vec<u8> {
        self.value.to_le_bytes().to_vec()
    }

    fn handle(&mut self, _key: ObjectKey, request: &Request, out: &mut HandlerOutput) {
        match request.op {
            OP_GET => out.answer(Ok(self.value.to_le_bytes().to_vec())),
            OP_ADD => {
                let Ok(bytes) = <[u8; 8]>::try_from(request.body.as_slice()) else {
                    return out.bad_request();
                };
                let Some(value) = self.value.checked_add(i64::from_le_bytes(bytes)) else {
                    return out.bad_request();
                };
                self.value = value;
                out.mutated = true;
                out.answer(Ok(value.to_le_bytes().to_vec()));
            }
            _ => out.bad_request(),
        }
    }
}

/// Decodes a counter state or answer.
pub fn counter_value(bytes: &[u8]) -> Option<i64> {
    Some(i64::from_le_bytes(bytes.try_into().ok()?))
}
