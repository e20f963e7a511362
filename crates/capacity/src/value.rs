//! What GetCapacity told us, made safe to publish.

/// A capacity reading, in bytes, as it will be published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// `capacity` of the object.
    pub available: i64,
    /// `maximumVolumeSize` of the object, when the driver reports one.
    pub maximum_volume_size: Option<i64>,
}

impl Capacity {
    /// Builds a publishable reading from a GetCapacity response.
    ///
    /// As upstream, what the driver says is published, including a `maximumVolumeSize` above
    /// `capacity`: drivers with over-committed thin pools report that on purpose, and the
    /// scheduler then admits volumes up to that size.
    ///
    /// Differs from upstream: a negative value becomes 0 (the apiserver rejects a negative
    /// `capacity` and does not validate `maximumVolumeSize`, which would silently exclude the
    /// segment).
    pub fn from_response(available: i64, maximum_volume_size: Option<i64>) -> Capacity {
        Capacity {
            available: available.max(0),
            maximum_volume_size: maximum_volume_size.map(|m| m.max(0)),
        }
    }

    /// The largest single volume the scheduler will consider to fit (its "volume limit").
    pub fn limit(&self) -> i64 {
        self.maximum_volume_size.unwrap_or(self.available)
    }

    /// Whether a negative value was changed to make the reading publishable.
    pub fn was_clamped(available: i64, maximum_volume_size: Option<i64>) -> bool {
        Capacity::from_response(available, maximum_volume_size)
            != Capacity {
                available,
                maximum_volume_size,
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases = [
            // (available, max) -> (available, max)
            ((10, None), (10, None)),
            ((10, Some(5)), (10, Some(5))),
            ((10, Some(10)), (10, Some(10))),
            // Over-committed thin pools: published as reported.
            ((10, Some(50)), (10, Some(50))),
            ((0, Some(50)), (0, Some(50))),
            ((-5, None), (0, None)),
            ((-5, Some(3)), (0, Some(3))),
            ((10, Some(-1)), (10, Some(0))),
            ((0, Some(0)), (0, Some(0))),
        ];
        for ((a, m), (wa, wm)) in cases {
            let c = Capacity::from_response(a, m);
            assert_eq!(
                (c.available, c.maximum_volume_size),
                (wa, wm),
                "input {a} {m:?}"
            );
            assert_eq!(Capacity::was_clamped(a, m), (a, m) != (wa, wm));
        }
    }

    #[test]
    fn limit_prefers_maximum_volume_size() {
        assert_eq!(Capacity::from_response(100, Some(40)).limit(), 40);
        assert_eq!(Capacity::from_response(100, None).limit(), 100);
        // A thin pool's maximum above its free capacity is what the scheduler admits.
        assert_eq!(Capacity::from_response(10, Some(50)).limit(), 50);
    }
}
