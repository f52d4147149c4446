// What the C++ test programs share: applying a case's prompt steps (box, points, mask) through
// the wrapper, so that every program prompts exactly as the Rust reference did, and a `main`
// that reports an escaping edgetam::Error.
#ifndef EDGETAM_TEST_SUPPORT_HPP
#define EDGETAM_TEST_SUPPORT_HPP

#include <edgetam.hpp>

#include <iostream>
#include <vector>

#include "../common/case.h"

// Applies step `s` of case `c` to `tracker` when it is a prompt; returns whether it was (the
// other steps, tracking, refresh, remove and reset, are the caller's).
inline bool add_prompt_step(edgetam::Tracker &tracker, const case_data &c, const case_step &s) {
    switch (s.kind) {
    case STEP_BOX:
        tracker.add_box(s.obj, EdgetamBox{s.box[0], s.box[1], s.box[2], s.box[3]}, s.frame);
        return true;
    case STEP_POINTS: {
        std::vector<EdgetamPoint> points;
        for (std::size_t k = 0; k < s.num_points; k++)
            points.push_back(EdgetamPoint{s.px[k], s.py[k], s.label[k]});
        tracker.add_points(s.obj, points, s.frame);
        return true;
    }
    case STEP_MASK:
        tracker.add_mask(s.obj, s.mask, c.width, c.height, 0, s.frame);
        return true;
    default:
        return false;
    }
}

// Runs a program's `run` and returns its exit status; an edgetam::Error escaping it is printed
// with its status name and ends the program with 1.
inline int run_reporting_errors(int (*run)(int, char **), int argc, char **argv) {
    try {
        return run(argc, argv);
    } catch (const edgetam::Error &e) {
        std::cerr << "edgetam error " << e.status_name() << ": " << e.what() << "\n";
        return 1;
    }
}

#endif
