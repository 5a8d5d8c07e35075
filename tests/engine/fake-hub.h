/* The fake Hugging Face Hub the tests run against: a SoupServer on
 * 127.0.0.1 in its own thread that answers with the real endpoint shapes
 * (see fake-hub.c). start_server() sets HF_ENDPOINT to it. */
#pragma once
#include <glib.h>
#include <libsoup/soup.h>

G_BEGIN_DECLS

#define COMMIT "0123456789abcdef0123456789abcdef01234567"
#define COMMIT2 "89abcdef0123456789abcdef0123456789abcdef"

typedef struct {
  const char *repo;       /* "models/org/tiny" or "datasets/org/ds" */
  const char *path;
  GBytes *data;
  gboolean lfs;
  char *sha256;           /* of data (the LFS etag) */
  char *served_etag;      /* what the server claims (differs for the bad repo) */
} FakeFile;

typedef struct {
  GMutex lock;
  GMainContext *ctx;
  GMainLoop *loop;
  SoupServer *server;
  GThread *thread;
  int port;
  char *base;             /* http://127.0.0.1:port */
  GPtrArray *files;       /* FakeFile* */
  /* counters */
  int api_calls, head_calls, get_bodies, cdn_gets, range_gets, auth_leaks;
  gboolean drop_next_flaky;
  gboolean busy_next;
  /* the search API */
  int search_calls;
  char *last_search;      /* the last /api/models query string */
  int throttle_us;        /* CDN: sleep this long per 64 KiB sent (0: full speed), for progress tests */
} FakeHub;

/* What the search and details APIs say about a model repo. */
typedef struct {
  const char *id;           /* "org/tiny" */
  const char *pipeline_tag;
  gint64 downloads, likes;
  const char *last_modified;
  const char *license;
  gint64 params;            /* safetensors.total in the search reply; 0: left out */
} FakeRepoMeta;

extern FakeHub hub_srv;
extern const FakeRepoMeta fake_repo_meta[];

void start_server (void);
void stop_server (void);
void add_file (const char *repo, const char *path, GBytes *data, gboolean lfs);
FakeFile *find_file (const char *repo, const char *path);
void rm_rf (const char *path);

G_END_DECLS
