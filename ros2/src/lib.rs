//! `edgetam-ros2`: a ROS 2 node around the EdgeTAM tracker, in pure Rust (`ros2-client` on
//! RustDDS: no ROS installation to build or run it). Camera frames in (`image`), ID masks,
//! tracked detections and an optional overlay out, prompts from a detector (`~/prompts`), a
//! person or a script (`~/prompt`) or parameters; `/diagnostics` once a second. The user guide
//! is `docs/src/ros2.md`; the contract the tests hold it to is `ros2/INTERFACE.md`.

pub mod args;
pub mod convert;
pub mod diag;
pub mod logging;
pub mod msgs;
pub mod node;
pub mod outputs;
pub mod prompts;

/// `--help`.
pub fn usage() -> String {
    let mut s = String::from(
        "edgetam-ros2: EdgeTAM video object tracking as a ROS 2 node (pure Rust, RustDDS)

USAGE:
  edgetam-ros2 [--ros-args] [-r __node:=NAME] [-r __ns:=/NS] [-r FROM:=TO]...
               [-p NAME:=VALUE]... [--params-file FILE] [--log-level LEVEL]

  e.g. edgetam-ros2 --ros-args -r image:=/camera/color/image_raw -p model:=/models/edgetam \\
         -p input_size:=512 -p prompts:='obj=1;box=200,120,380,300'

TOPICS (relative to the namespace; ~ = the node's own name, default /edgetam):
  sub  image             sensor_msgs/Image (rgb8 bgr8 rgba8 bgra8 mono8)  best effort, keep last 5
  sub  image/compressed  sensor_msgs/CompressedImage (JPEG, PNG)          best effort, keep last 5
  sub  ~/prompt          std_msgs/String: obj=1;box=x0,y0,x1,y1 | obj=2;point=x,y,1 | remove=ID
                         | reset, each with an optional frame=N (N = received frames from 0)
  sub  ~/prompts         vision_msgs/Detection2DArray: boxes seed / re-seed objects by IoU
  pub  ~/mask            sensor_msgs/Image mono16: pixel = object id, 0 background
  pub  ~/detections      vision_msgs/Detection2DArray: box, id = tracking id, score
  pub  ~/overlay         sensor_msgs/Image rgb8 (with publish_overlay:=true)
  pub  /diagnostics      diagnostic_msgs/DiagnosticArray, once a second
  (subscriptions of prompts and all publications: reliable, keep last 10, volatile)

PARAMETERS:
",
    );
    for (name, ty, default, what) in args::PARAMS {
        s.push_str(&format!("  {name:<16} {ty:<7} {default:<11} {what}\n"));
    }
    s.push_str(
        "
ENVIRONMENT:
  ROS_DOMAIN_ID                            DDS domain (default 0)
  ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST  discovery and traffic on 127.0.0.1 only, no multicast
  ROS_LOCALHOST_ONLY=1                     the same (older distros)

Exit codes: 2 for a bad argument, parameter or model (the reason on stderr), 1 if the tracker
fails while running.
",
    );
    s
}
