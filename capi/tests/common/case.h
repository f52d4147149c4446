/*
 * The test case the C and C++ programs replay (written by capi/examples/reference.rs): the
 * script's steps, the frames, and the output format both programs and the Rust reference write.
 * Plain C that also compiles as C++ (static functions, explicit casts).
 */
#ifndef EDGETAM_TEST_CASE_H
#define EDGETAM_TEST_CASE_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum case_kind { STEP_BOX, STEP_POINTS, STEP_MASK, STEP_TRACK, STEP_REFRESH, STEP_REMOVE, STEP_RESET };

#define CASE_MAX_POINTS 16

struct case_step {
    enum case_kind kind;
    uint64_t frame;  /* tracker frame of a prompt */
    uint32_t obj;
    size_t image;    /* index into frames.rgb (track) */
    float box[4];
    size_t num_points;
    float px[CASE_MAX_POINTS], py[CASE_MAX_POINTS];
    int32_t label[CASE_MAX_POINTS];
    uint8_t *mask;   /* width * height bytes (mask) */
};

struct case_data {
    uint32_t width, height;
    size_t num_frames;
    uint8_t *frames; /* num_frames * width * height * 3 */
    struct case_step *steps;
    size_t num_steps;
};

/* Reads a whole file; NULL on failure. */
static uint8_t *case_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = (uint8_t *)malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) *len = (size_t)n;
    return buf;
}

static void case_free(struct case_data *c) {
    for (size_t i = 0; i < c->num_steps; i++) free(c->steps[i].mask);
    free(c->steps);
    free(c->frames);
    memset(c, 0, sizeof *c);
}

/* Loads DIR/script.txt, DIR/frames.rgb and the mask files; 0 on success. */
static int case_load(const char *dir, struct case_data *c) {
    char path[4096], word[64], name[256];
    memset(c, 0, sizeof *c);
    snprintf(path, sizeof path, "%s/script.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); return -1; }
    if (fscanf(f, " size %u %u %zu", &c->width, &c->height, &c->num_frames) != 3) {
        fprintf(stderr, "%s: no size line\n", path);
        fclose(f);
        return -1;
    }
    size_t cap = 0;
    while (fscanf(f, " %63s", word) == 1) {
        if (c->num_steps == cap) {
            cap = cap ? 2 * cap : 64;
            c->steps = (struct case_step *)realloc(c->steps, cap * sizeof *c->steps);
            if (!c->steps) { fclose(f); return -1; }
        }
        struct case_step *s = &c->steps[c->num_steps];
        memset(s, 0, sizeof *s);
        int ok = 1;
        if (!strcmp(word, "box")) {
            s->kind = STEP_BOX;
            ok = fscanf(f, " %" SCNu64 " %u %f %f %f %f", &s->frame, &s->obj, &s->box[0],
                        &s->box[1], &s->box[2], &s->box[3]) == 6;
        } else if (!strcmp(word, "points")) {
            s->kind = STEP_POINTS;
            ok = fscanf(f, " %" SCNu64 " %u %zu", &s->frame, &s->obj, &s->num_points) == 3 &&
                 s->num_points <= CASE_MAX_POINTS;
            for (size_t i = 0; ok && i < s->num_points; i++)
                ok = fscanf(f, " %f %f %d", &s->px[i], &s->py[i], &s->label[i]) == 3;
        } else if (!strcmp(word, "mask")) {
            s->kind = STEP_MASK;
            ok = fscanf(f, " %" SCNu64 " %u %255s", &s->frame, &s->obj, name) == 3;
            if (ok) {
                size_t len = 0;
                snprintf(path, sizeof path, "%s/%s", dir, name);
                s->mask = case_read_file(path, &len);
                ok = s->mask && len == (size_t)c->width * c->height;
            }
        } else if (!strcmp(word, "track")) {
            s->kind = STEP_TRACK;
            ok = fscanf(f, " %zu", &s->image) == 1 && s->image < c->num_frames;
        } else if (!strcmp(word, "refresh")) {
            s->kind = STEP_REFRESH;
        } else if (!strcmp(word, "remove")) {
            s->kind = STEP_REMOVE;
            ok = fscanf(f, " %u", &s->obj) == 1;
        } else if (!strcmp(word, "reset")) {
            s->kind = STEP_RESET;
        } else {
            ok = 0;
        }
        c->num_steps++;
        if (!ok) {
            fprintf(stderr, "script.txt: bad step %zu (%s)\n", c->num_steps, word);
            fclose(f);
            case_free(c);
            return -1;
        }
    }
    fclose(f);
    size_t len = 0;
    snprintf(path, sizeof path, "%s/frames.rgb", dir);
    c->frames = case_read_file(path, &len);
    if (!c->frames || len != c->num_frames * c->width * c->height * 3) {
        fprintf(stderr, "%s: missing or of the wrong size\n", path);
        case_free(c);
        return -1;
    }
    return 0;
}

static uint32_t case_bits(float v) {
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

/* One output's header line (the format of reference.rs's write_result). */
static void case_write_frame(FILE *text, size_t k, uint64_t frame, uint32_t w, uint32_t h, size_t n) {
    fprintf(text, "out %zu frame %" PRIu64 " size %ux%u objects %zu\n", k, frame, w, h, n);
}

/* One object's line and its mask's bytes. */
static void case_write_object(FILE *text, FILE *masks, const EdgetamObject *o, const uint8_t *mask) {
    fprintf(text,
            "  obj %u score %08x visible %u box %u %u %u %u %u area %llu iou %08x prompted %u\n",
            o->id, case_bits(o->score), o->visible, o->has_box, o->bbox[0], o->bbox[1], o->bbox[2],
            o->bbox[3], (unsigned long long)o->area, case_bits(o->iou), o->prompted);
    fwrite(mask, 1, (size_t)o->mask_width * o->mask_height, masks);
}

#endif
