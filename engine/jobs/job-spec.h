/* HnJobSpec: the description of one job (a kind plus typed options), shared by
 * the GUI and the CLI. The GUI's widgets edit a spec; the spec renders the
 * exact `hierarchos-native-cli KIND --flag value ...` argv for the command
 * preview; the CLI parses argv back into the same spec. A round-trip test
 * (tests/engine/test-job-spec.c) keeps both directions in step.
 *
 * Every option is declared once in a table (engine/jobs/job-options.c) with
 * its flag (kebab-case, written with "--"), type, default, range, help text,
 * aliases and flags; each kind lists the options it takes, optionally with a
 * kind-specific default ("lr=2e-4"; "seq-len=" for none). Underscore
 * spellings (--batch_size) are accepted for every flag.
 *
 * To add an option: add an HnOptionInfo row to hn_option_table and its name
 * to the kinds that take it in hn_job_kind_table or the commands that take
 * it in hn_command_table (all in job-options.c).
 *
 * No GTK here: the GUI listens to the "changed" signal (detailed with the
 * option name, e.g. "changed::lr") to keep widgets and the preview in sync. */
#pragma once
#include <glib-object.h>
#include <stdio.h>

G_BEGIN_DECLS

typedef enum {
  HN_OPTION_STRING,
  HN_OPTION_INT,     /* gint64 */
  HN_OPTION_DOUBLE,
  HN_OPTION_BOOL,    /* a presence flag: "--do-sample" sets TRUE; "--do-sample=false" also parses */
  HN_OPTION_STRINGV, /* repeatable: "--prompt a --prompt b" */
  HN_OPTION_CHOICE,  /* a string from a fixed list */
} HnOptionType;

typedef enum {
  HN_OPTION_FLAG_NONE = 0,
  HN_OPTION_SECRET = 1 << 0,        /* masked in previews (e.g. --hf-token) */
  HN_OPTION_MODEL_DEFAULT = 1 << 1, /* unset means "the model's own setting": written whenever set,
                                       even when equal to the table default */
  HN_OPTION_MIN_EXCLUSIVE = 1 << 2, /* value must be > min (not >=) */
  HN_OPTION_MAX_EXCLUSIVE = 1 << 3, /* value must be < max */
  HN_OPTION_ADVANCED = 1 << 4,      /* the GUI may fold it away */
} HnOptionFlags;

/* How the GUI edits a string option. */
typedef enum {
  HN_OPTION_HINT_NONE,
  HN_OPTION_HINT_FILE,      /* an existing file */
  HN_OPTION_HINT_FOLDER,    /* an existing folder */
  HN_OPTION_HINT_SAVE_FILE, /* a file to write */
  HN_OPTION_HINT_SAVE_FOLDER, /* a folder to write into (created) */
  HN_OPTION_HINT_HUB_ID,    /* org/name on the Hugging Face Hub */
  HN_OPTION_HINT_DEVICE,    /* a Vulkan device index */
  HN_OPTION_HINT_MULTILINE, /* free text (prompts) */
  HN_OPTION_HINT_DEVICES,   /* comma-separated Vulkan device indices ("0,1") */
  HN_OPTION_HINT_ID_LISTS,  /* STRINGV of comma-separated token ids: one text field holds several, "1,2; 1,5" */
} HnOptionHint;

typedef struct {
  const char *name;          /* flag without "--", kebab-case: "batch-size" */
  HnOptionType type;
  const char *default_value; /* textual default, parsed by type; NULL: unset/empty */
  double min, max;           /* INT/DOUBLE range; min > max means unbounded */
  const char *choices;       /* CHOICE: space-separated allowed values */
  const char *label;         /* short title for the GUI (N_()) */
  const char *help;          /* one sentence (N_()) */
  const char *aliases;       /* space-separated other flag names, without "--" */
  HnOptionFlags flags;
  HnOptionHint hint;
  const char *metavar;       /* "DIR", "N", ... for --help; NULL: derived from the type */
} HnOptionInfo;

typedef struct {
  const char *name;          /* "transformer-generate" */
  const char *aliases;       /* space-separated: "generate infer" */
  const char *title;         /* N_("Generate text") */
  const char *summary;       /* one line for --help */
  const char *options;       /* space-separated option names, each optionally "name=default" */
  const char *one_of;        /* ';'-separated groups "a|b": exactly one option of each group must be set */
  const char *short_flags;   /* space-separated one-letter flags "t=tokenizer-path": -t VALUE; NULL: none */
} HnJobKindInfo;

/* The tables (job-options.c). Each ends with a row whose name is NULL.
 * hn_command_table holds the CLI commands that are no job kind (tokenize,
 * devices, merge-lora...): they take their options from the same option
 * table and parse, check and print --help through HnJobSpec too, but no
 * HnJob runs them and the GUI does not list them. */
extern const HnOptionInfo hn_option_table[];
extern const HnJobKindInfo hn_job_kind_table[];
extern const HnJobKindInfo hn_command_table[];

/* A job kind by its name or an alias; NULL if unknown (or a command). */
const HnJobKindInfo *hn_job_kind_lookup (const char *name);
/* A command of hn_command_table by its name or an alias; NULL if unknown. */
const HnJobKindInfo *hn_command_lookup (const char *name);

#define HN_TYPE_JOB_SPEC (hn_job_spec_get_type ())
G_DECLARE_FINAL_TYPE (HnJobSpec, hn_job_spec, HN, JOB_SPEC, GObject)

/* A spec of `kind` (name or alias) with every option unset (= its default).
 * Fails with HN_ERROR_INVALID_ARGUMENT for an unknown kind. */
HnJobSpec *hn_job_spec_new (const char *kind, GError **error);
HnJobSpec *hn_job_spec_copy (HnJobSpec *self);
gboolean hn_job_spec_equal (HnJobSpec *a, HnJobSpec *b);

const char *hn_job_spec_get_kind (HnJobSpec *self);        /* canonical name */
gboolean hn_job_spec_is_command (HnJobSpec *self);         /* a spec of hn_command_table */
const HnJobKindInfo *hn_job_spec_get_kind_info (HnJobSpec *self);

/* The options of this spec's kind, in canonical order, with the kind's
 * defaults applied. n_options may be NULL. */
const HnOptionInfo *hn_job_spec_get_options (HnJobSpec *self, guint *n_options);
/* An option by name, alias or underscore spelling, with or without "--";
 * NULL if this kind does not take it. */
const HnOptionInfo *hn_job_spec_lookup (HnJobSpec *self, const char *name);

/* Getters return the value, or the default when unset. Asking for an option
 * the kind lacks, or with the wrong type, is a programming error
 * (g_critical) and returns 0/NULL. */
const char *hn_job_spec_get_string (HnJobSpec *self, const char *name); /* STRING and CHOICE; may be NULL */
gint64 hn_job_spec_get_int (HnJobSpec *self, const char *name);
double hn_job_spec_get_double (HnJobSpec *self, const char *name);
gboolean hn_job_spec_get_bool (HnJobSpec *self, const char *name);
const char *const *hn_job_spec_get_strv (HnJobSpec *self, const char *name); /* never NULL */
gboolean hn_job_spec_is_set (HnJobSpec *self, const char *name);

/* Setters store the value without range checks (so a GUI can hold an invalid
 * value and flag it; see hn_job_spec_check_option). Setting an ordinary
 * option to its default unsets it. Each emits "changed::NAME" if the value
 * changed. A NULL or "" string unsets a STRING/CHOICE option; a NULL/empty
 * strv unsets a STRINGV option. */
void hn_job_spec_set_string (HnJobSpec *self, const char *name, const char *value);
void hn_job_spec_set_int (HnJobSpec *self, const char *name, gint64 value);
void hn_job_spec_set_double (HnJobSpec *self, const char *name, double value);
void hn_job_spec_set_bool (HnJobSpec *self, const char *name, gboolean value);
void hn_job_spec_set_strv (HnJobSpec *self, const char *name, const char *const *value);
void hn_job_spec_unset (HnJobSpec *self, const char *name);

/* Parses `text` by the option's type and range (as the CLI does) and sets it;
 * for STRINGV it appends. Errors name the flag, the value and the allowed
 * range or choices. */
gboolean hn_job_spec_set_from_string (HnJobSpec *self, const char *name, const char *text,
                                      GError **error);
/* The current value as text ("5e-05", "true", "a,b" for a strv). */
char *hn_job_spec_value_to_string (HnJobSpec *self, const char *name);

/* Checks one option's current value against its range/choices. */
gboolean hn_job_spec_check_option (HnJobSpec *self, const char *name, GError **error);
/* Checks every option and the kind's "exactly one of" groups: the spec is
 * ready to run. The message says which flag is missing or wrong. */
gboolean hn_job_spec_validate (HnJobSpec *self, GError **error);

/* The devices a job runs on: --device-indices "0,1" parsed (an index may
 * repeat: "0,0" opens two logical devices on one GPU, for testing), else the
 * one --device-index names (-1 = the best device). A GArray of int; NULL
 * with an error naming the flag for a malformed list, or when both flags are
 * set. */
GArray *hn_job_spec_get_devices (HnJobSpec *self, GError **error);
/* Parses a device list "0,1" (indices 0..1024, at least one). */
GArray *hn_parse_device_indices (const char *text, GError **error);

typedef enum {
  HN_ARGV_DEFAULT = 0,
  HN_ARGV_UNMASKED = 1 << 0,     /* write secrets as they are (for execution); default masks them */
  HN_ARGV_WITH_PROGRAM = 1 << 1, /* start with "hierarchos-native-cli" */
} HnArgvFlags;

#define HN_JOB_SPEC_MASK "********"
#define HN_CLI_PROGRAM "hierarchos-native-cli"

/* argv = [program,] kind, then the set options in canonical (table) order,
 * only those that differ from their default (MODEL_DEFAULT options whenever
 * set): "--flag value", "--flag" for a true bool, one "--flag value" per
 * element of a strv. NULL-terminated, free with g_strfreev. */
char **hn_job_spec_to_argv (HnJobSpec *self, HnArgvFlags flags);
/* The same as one shell-quoted line, for the command preview. */
char *hn_job_spec_to_command_line (HnJobSpec *self, HnArgvFlags flags);

/* Parses argv (argv[0] = the kind name or alias, as a CLI subcommand gets it).
 * Accepts "--flag value", "--flag=value", aliases and underscore spellings.
 * Unknown flags, missing values and bad values are errors naming the flag.
 * Does not check the "one of" groups: call hn_job_spec_validate. */
HnJobSpec *hn_job_spec_new_from_argv (int argc, const char *const *argv, GError **error);

/* Writes --help for a kind, generated from the option table. */
void hn_job_spec_print_help (const HnJobKindInfo *kind, FILE *out);

G_END_DECLS
