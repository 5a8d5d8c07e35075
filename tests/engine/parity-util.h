/* Helpers shared by the parity tests: fixtures in tests/fixtures/parity, their
 * expected.json, and the comparisons every family makes. */
#pragma once
#include <json-glib/json-glib.h>
#include <stdint.h>

#include "generate/generate.h"

G_BEGIN_DECLS

/* $HN_SOURCE_DIR/tests/fixtures/parity/<rel> */
char *parity_fixture_dir (const char *rel);
/* The root object of a JSON file (asserts it parses). */
JsonObject *parity_load_json (JsonParser *p, const char *path);
/* <fixture>/expected.json */
JsonObject *parity_load_expected (JsonParser *p, const char *fixture);
/* An int32 array member. */
GArray *parity_int_array (JsonObject *o, const char *member);
/* Every logit within atol = rtol = 1e-4 of transformers' (a message names the first that is not). */
void parity_compare_logits (const char *name, const float *got, JsonArray *want, gsize n);
void parity_assert_ids (const char *what, GArray *got, GArray *want);
/* The options of a fixture's "beam" object (num_beams, lengths, length_penalty, early_stopping). */
void parity_beam_options (JsonObject *beam, HnGenerateOptions *o);
/* A temporary model folder of <fixture dir>'s config.json and trained.safetensors (symlinks), so the
 * trained weights load through the model's own loader; parity_trained_dir_remove deletes it. */
char *parity_trained_dir (const char *dir);
void parity_trained_dir_remove (const char *tmp);

/* dst/NAME <- src/NAME, with `from` replaced by `to` in the text when given */
void parity_copy_file (const char *src, const char *dst, const char *name, const char *from, const char *to);

G_END_DECLS
