//! The ROS 2 messages the node exchanges, as serde structs whose field order is the `.msg`
//! definitions' (CDR serializes fields in declaration order, aligned to their size; fixed
//! arrays without a length, sequences and strings with a `u32` length, strings with their NUL).
//!
//! Definitions: std_msgs 5.x (`Header`, `String`), builtin_interfaces (`Time`), sensor_msgs 5.x
//! (`Image`, `CompressedImage`), geometry_msgs (`Point`, `Quaternion`, `Pose`,
//! `PoseWithCovariance`), vision_msgs 4.x (`Point2D`, `Pose2D`, `BoundingBox2D`,
//! `ObjectHypothesis`, `ObjectHypothesisWithPose`, `Detection2D`, `Detection2DArray`),
//! diagnostic_msgs (`KeyValue`, `DiagnosticStatus`, `DiagnosticArray`).

use serde::{Deserialize, Serialize};

/// `builtin_interfaces/msg/Time`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Time {
    pub sec: i32,
    pub nanosec: u32,
}

impl Time {
    /// The wall clock now (ROS time without simulation).
    pub fn now() -> Self {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Self {
            sec: i32::try_from(d.as_secs()).unwrap_or(i32::MAX),
            nanosec: d.subsec_nanos(),
        }
    }
}

/// `std_msgs/msg/Header`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub stamp: Time,
    pub frame_id: String,
}

/// `std_msgs/msg/String`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StringMsg {
    pub data: String,
}

/// `sensor_msgs/msg/Image`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    pub header: Header,
    pub height: u32,
    pub width: u32,
    pub encoding: String,
    pub is_bigendian: u8,
    pub step: u32,
    #[serde(with = "bytes")]
    pub data: Vec<u8>,
}

/// `sensor_msgs/msg/CompressedImage`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressedImage {
    pub header: Header,
    pub format: String,
    #[serde(with = "bytes")]
    pub data: Vec<u8>,
}

/// `geometry_msgs/msg/Point`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    pub z: f64,
}

/// `geometry_msgs/msg/Quaternion` (the default, as in ROS, is the identity).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quaternion {
    pub x: f64,
    pub y: f64,
    pub z: f64,
    pub w: f64,
}

impl Default for Quaternion {
    fn default() -> Self {
        Self {
            x: 0.0,
            y: 0.0,
            z: 0.0,
            w: 1.0,
        }
    }
}

/// `geometry_msgs/msg/Pose`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Pose {
    pub position: Point,
    pub orientation: Quaternion,
}

/// `geometry_msgs/msg/PoseWithCovariance`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PoseWithCovariance {
    pub pose: Pose,
    pub covariance: Covariance,
}

/// `float64[36]`: a fixed array, in CDR its 36 values with no length (serde's derives stop at
/// 32 elements, hence by hand).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Covariance(pub [f64; 36]);

impl Default for Covariance {
    fn default() -> Self {
        Self([0.0; 36])
    }
}

impl Serialize for Covariance {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut t = s.serialize_tuple(36)?;
        for v in &self.0 {
            t.serialize_element(v)?;
        }
        t.end()
    }
}

impl<'de> Deserialize<'de> for Covariance {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Covariance;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("36 float64 values")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Covariance, A::Error> {
                let mut c = [0.0; 36];
                for (i, v) in c.iter_mut().enumerate() {
                    *v = a
                        .next_element()?
                        .ok_or_else(|| serde::de::Error::invalid_length(i, &self))?;
                }
                Ok(Covariance(c))
            }
        }
        d.deserialize_tuple(36, V)
    }
}

/// `vision_msgs/msg/Point2D`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Point2D {
    pub x: f64,
    pub y: f64,
}

/// `vision_msgs/msg/Pose2D`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Pose2D {
    pub position: Point2D,
    pub theta: f64,
}

/// `vision_msgs/msg/BoundingBox2D`: centre and size in pixels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BoundingBox2D {
    pub center: Pose2D,
    pub size_x: f64,
    pub size_y: f64,
}

impl BoundingBox2D {
    /// `[x0, y0, x1, y1]` (exclusive right and bottom edges).
    pub fn corners(&self) -> [f64; 4] {
        let (cx, cy) = (self.center.position.x, self.center.position.y);
        let (hw, hh) = (self.size_x / 2.0, self.size_y / 2.0);
        [cx - hw, cy - hh, cx + hw, cy + hh]
    }
}

/// `vision_msgs/msg/ObjectHypothesis`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectHypothesis {
    pub class_id: String,
    pub score: f64,
}

/// `vision_msgs/msg/ObjectHypothesisWithPose`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectHypothesisWithPose {
    pub hypothesis: ObjectHypothesis,
    pub pose: PoseWithCovariance,
}

/// `vision_msgs/msg/Detection2D`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Detection2D {
    pub header: Header,
    pub results: Vec<ObjectHypothesisWithPose>,
    pub bbox: BoundingBox2D,
    pub id: String,
}

/// `vision_msgs/msg/Detection2DArray`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Detection2DArray {
    pub header: Header,
    pub detections: Vec<Detection2D>,
}

/// `diagnostic_msgs/msg/KeyValue`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    pub key: String,
    pub value: String,
}

/// `diagnostic_msgs/msg/DiagnosticStatus` (`level`: 0 OK, 1 WARN, 2 ERROR, 3 STALE).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagnosticStatus {
    pub level: u8,
    pub name: String,
    pub message: String,
    pub hardware_id: String,
    pub values: Vec<KeyValue>,
}

/// `diagnostic_msgs/msg/DiagnosticArray`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagnosticArray {
    pub header: Header,
    pub status: Vec<DiagnosticStatus>,
}

/// `uint8[]` as one block (`serialize_bytes`: the CDR `u32` length and the bytes) instead of
/// one serde call per byte.
mod bytes {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a byte sequence")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::with_capacity(a.size_hint().unwrap_or(0).min(1 << 24));
                while let Some(b) = a.next_element()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// The CDR layout of the messages, checked against byte sequences written out by hand from the
/// `.msg` definitions (XCDR1 little-endian, as rmw implementations send them; offsets counted
/// from the start of the payload, after the 4-byte encapsulation header; every primitive
/// aligned to its own size; strings = u32 length including the NUL, bytes, NUL; sequences =
/// u32 count, elements; fixed arrays = elements only).
#[cfg(test)]
mod cdr_tests {
    use super::*;
    use ros2_client::dds::rustdds::no_key::{DeserializerAdapter, SerializerAdapter};
    use ros2_client::dds::rustdds::{
        CDRDeserializerAdapter, CDRSerializerAdapter, RepresentationIdentifier,
    };

    fn cdr<T: Serialize>(v: &T) -> Vec<u8> {
        <CDRSerializerAdapter<T> as SerializerAdapter<T>>::to_bytes(v)
            .unwrap()
            .to_vec()
    }

    fn back<T: serde::de::DeserializeOwned + 'static>(b: &[u8]) -> T {
        <CDRDeserializerAdapter<T> as DeserializerAdapter<T>>::from_bytes(
            b,
            RepresentationIdentifier::CDR_LE,
        )
        .unwrap()
    }

    /// `msg` serializes to exactly the bytes `parts` spell, one after the other, and those bytes
    /// deserialize back to `msg`.
    fn assert_layout<T>(msg: &T, parts: &[&[u8]])
    where
        T: Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug + 'static,
    {
        let expected = parts.concat();
        assert_eq!(cdr(msg), expected);
        assert_eq!(&back::<T>(&expected), msg);
    }

    fn header() -> Header {
        Header {
            stamp: Time { sec: 1, nanosec: 2 },
            frame_id: "cam".into(),
        }
    }

    #[test]
    fn detection2d_array_layout() {
        let msg = Detection2DArray {
            header: header(),
            detections: vec![Detection2D {
                header: header(),
                results: vec![ObjectHypothesisWithPose {
                    hypothesis: ObjectHypothesis {
                        class_id: "7".into(),
                        score: 0.5,
                    },
                    pose: PoseWithCovariance::default(),
                }],
                bbox: BoundingBox2D {
                    center: Pose2D {
                        position: Point2D { x: 10.0, y: 20.0 },
                        theta: 0.0,
                    },
                    size_x: 4.0,
                    size_y: 6.0,
                },
                id: "7".into(),
            }],
        };
        let mut e: Vec<u8> = Vec::new();
        // 0: header.stamp.sec (int32 1), 4: nanosec (uint32 2)
        e.extend([1, 0, 0, 0, 2, 0, 0, 0]);
        // 8: frame_id: length 4 ("cam" + NUL), 12: c a m NUL
        e.extend([4, 0, 0, 0, b'c', b'a', b'm', 0]);
        // 16: detections: count 1
        e.extend([1, 0, 0, 0]);
        // 20: detections[0].header: stamp 1, 2; frame_id "cam"
        e.extend([1, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, b'c', b'a', b'm', 0]);
        // 36: results: count 1
        e.extend([1, 0, 0, 0]);
        // 40: results[0].hypothesis.class_id: length 2, "7" NUL (ends at 46)
        e.extend([2, 0, 0, 0, b'7', 0]);
        // 46: 2 bytes of padding: score (float64) aligns to 8 -> 48
        e.extend([0, 0]);
        // 48: score 0.5 = 0x3FE0000000000000
        e.extend([0, 0, 0, 0, 0, 0, 0xE0, 0x3F]);
        // 56: pose.pose.position x, y, z = 0.0
        e.extend([0u8; 24]);
        // 80: pose.pose.orientation x, y, z = 0.0, 104: w = 1.0 = 0x3FF0000000000000
        e.extend([0u8; 24]);
        e.extend([0, 0, 0, 0, 0, 0, 0xF0, 0x3F]);
        // 112: pose.covariance float64[36], no length: 288 zero bytes (to 400)
        e.extend([0u8; 288]);
        // 400: bbox.center.position.x 10.0 = 0x4024000000000000, 408: y 20.0 = 0x4034...
        e.extend([0, 0, 0, 0, 0, 0, 0x24, 0x40]);
        e.extend([0, 0, 0, 0, 0, 0, 0x34, 0x40]);
        // 416: bbox.center.theta 0.0
        e.extend([0u8; 8]);
        // 424: size_x 4.0 = 0x4010..., 432: size_y 6.0 = 0x4018...
        e.extend([0, 0, 0, 0, 0, 0, 0x10, 0x40]);
        e.extend([0, 0, 0, 0, 0, 0, 0x18, 0x40]);
        // 440: id: length 2, "7" NUL (ends at 446)
        e.extend([2, 0, 0, 0, b'7', 0]);
        assert_eq!(e.len(), 446);
        assert_layout(&msg, &[&e]);
    }

    #[test]
    fn empty_detection_array_and_padding_after_odd_frame_id() {
        // frame_id "ab": length 3 at 8, bytes at 12..15; detections count aligns to 16.
        let msg = Detection2DArray {
            header: Header {
                stamp: Time {
                    sec: -1,
                    nanosec: 0,
                },
                frame_id: "ab".into(),
            },
            detections: vec![],
        };
        assert_layout(
            &msg,
            &[
                &[0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0][..],
                &[3, 0, 0, 0, b'a', b'b', 0],
                &[0],          // 15: padding to 16
                &[0, 0, 0, 0], // 16: count 0
            ],
        );
    }

    #[test]
    fn image_layout() {
        let msg = Image {
            header: header(),
            height: 1,
            width: 2,
            encoding: "mono16".into(),
            is_bigendian: 0,
            step: 4,
            data: vec![1, 0, 2, 0],
        };
        assert_layout(
            &msg,
            &[
                &[1, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, b'c', b'a', b'm', 0][..],
                &[1, 0, 0, 0],                                        // 16: height
                &[2, 0, 0, 0],                                        // 20: width
                &[7, 0, 0, 0, b'm', b'o', b'n', b'o', b'1', b'6', 0], // 24: encoding, ends at 35
                &[0],                                                 // 35: is_bigendian (uint8)
                &[4, 0, 0, 0],                                        // 36: step
                &[4, 0, 0, 0, 1, 0, 2, 0],                            // 40: data: count, bytes
            ],
        );
    }

    #[test]
    fn diagnostic_array_layout() {
        let msg = DiagnosticArray {
            header: header(),
            status: vec![DiagnosticStatus {
                level: 1,
                name: "n".into(),
                message: "".into(),
                hardware_id: "h".into(),
                values: vec![KeyValue {
                    key: "k".into(),
                    value: "v".into(),
                }],
            }],
        };
        assert_layout(
            &msg,
            &[
                &[1, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, b'c', b'a', b'm', 0][..],
                &[1, 0, 0, 0],                // 16: status count
                &[1],                         // 20: level (byte)
                &[0, 0, 0],                   // 21: padding to 24
                &[2, 0, 0, 0, b'n', 0],       // 24: name
                &[0, 0],                      // 30: padding to 32
                &[1, 0, 0, 0, 0],             // 32: message "" (length 1: the NUL)
                &[0, 0, 0],                   // 37: padding to 40
                &[2, 0, 0, 0, b'h', 0],       // 40: hardware_id
                &[0, 0],                      // 46: padding to 48
                &[1, 0, 0, 0],                // 48: values count
                &[2, 0, 0, 0, b'k', 0, 0, 0], // 52: key, padding to 60
                &[2, 0, 0, 0, b'v', 0],       // 60: value
            ],
        );
    }
}
