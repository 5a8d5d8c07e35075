/* HnJobSpec: typed option values for one job kind, and their argv form. */
#include "jobs/job-spec.h"
#include "base/hn-error.h"

#include <errno.h>
#include <math.h>
#include <string.h>

/* ---- per-kind option tables, built once ------------------------------- */

typedef struct {
  gboolean set;
  char *s;      /* STRING, CHOICE */
  gint64 i;     /* INT */
  double d;     /* DOUBLE */
  gboolean b;   /* BOOL */
  GPtrArray *v; /* STRINGV, NULL-terminated */
} Value;

typedef struct {
  const HnJobKindInfo *kind;
  HnOptionInfo *options;  /* n_options, table rows with the kind's defaults */
  guint n_options;
  Value *defaults;        /* parsed defaults */
  GHashTable *by_name;    /* normalized name or alias -> GUINT_TO_POINTER (index + 1) */
  GPtrArray *strings;     /* owned default strings */
  char ***groups;         /* one_of groups, each a strv of option names; NULL-terminated */
  char short_of[26];      /* -x: index + 1 of the option a lower-case letter stands for, 0: none */
  gboolean command;       /* a CLI command of hn_command_table, not a job kind */
} KindData;

static KindData *kind_data;
static guint n_kinds;

/* "--batch_size" -> "batch-size" */
static char *
normalize_name (const char *name)
{
  while (*name == '-')
    name++;
  char *n = g_strdup (name);
  for (char *p = n; *p; p++)
    if (*p == '_')
      *p = '-';
  return n;
}

static const HnOptionInfo *
table_lookup (const char *name)
{
  for (const HnOptionInfo *o = hn_option_table; o->name; o++)
    if (strcmp (o->name, name) == 0)
      return o;
  return NULL;
}

static gboolean parse_value (const HnOptionInfo *o, const char *text, Value *out, GError **error);
static void value_clear (Value *v);

static void
build_kind (KindData *kd, const HnJobKindInfo *kind)
{
  g_auto (GStrv) names = g_strsplit_set (kind->options, " ", -1);
  GArray *opts = g_array_new (FALSE, TRUE, sizeof (HnOptionInfo));
  kd->kind = kind;
  kd->strings = g_ptr_array_new_with_free_func (g_free);
  kd->by_name = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  for (char **n = names; *n; n++)
    {
      if (**n == '\0')
        continue;
      char *eq = strchr (*n, '=');
      if (eq)
        *eq = '\0';
      const HnOptionInfo *row = table_lookup (*n);
      if (!row)
        g_error ("job kind %s lists unknown option %s", kind->name, *n);
      HnOptionInfo o = *row;
      if (eq)
        {
          char *def = g_strdup (eq + 1);
          g_ptr_array_add (kd->strings, def);
          o.default_value = *def ? def : NULL; /* "name=": no default for this kind */
        }
      g_array_append_val (opts, o);
    }
  kd->n_options = opts->len;
  kd->options = (HnOptionInfo *) g_array_free (opts, FALSE);
  kd->defaults = g_new0 (Value, kd->n_options);
  for (guint i = 0; i < kd->n_options; i++)
    {
      const HnOptionInfo *o = &kd->options[i];
      g_autoptr (GError) error = NULL;
      if (o->default_value && !parse_value (o, o->default_value, &kd->defaults[i], &error))
        g_error ("job kind %s: bad default for --%s: %s", kind->name, o->name, error->message);
      if (g_hash_table_contains (kd->by_name, o->name))
        g_error ("job kind %s lists --%s twice (or another option has it as an alias)", kind->name, o->name);
      g_hash_table_insert (kd->by_name, g_strdup (o->name), GUINT_TO_POINTER (i + 1));
    }
  /* aliases after every name, so that an alias never shadows an option of the kind */
  for (guint i = 0; i < kd->n_options; i++)
    if (kd->options[i].aliases)
      {
        g_auto (GStrv) al = g_strsplit (kd->options[i].aliases, " ", -1);
        for (char **a = al; *a; a++)
          {
            if (!**a)
              continue;
            char *n = normalize_name (*a);
            if (g_hash_table_contains (kd->by_name, n))
              g_error ("job kind %s: --%s is both an option and an alias of --%s", kind->name, n, kd->options[i].name);
            g_hash_table_insert (kd->by_name, n, GUINT_TO_POINTER (i + 1));
          }
      }
  /* "t=tokenizer-path o=out-dir": one-letter flags */
  g_auto (GStrv) shorts = g_strsplit (kind->short_flags ? kind->short_flags : "", " ", -1);
  for (char **f = shorts; *f; f++)
    {
      if (!**f)
        continue;
      guint idx = GPOINTER_TO_UINT (g_hash_table_lookup (kd->by_name, *f + 2));
      if ((*f)[0] < 'a' || (*f)[0] > 'z' || (*f)[1] != '=' || !idx || kd->short_of[(*f)[0] - 'a'])
        g_error ("job kind %s: bad one-letter flag '%s'", kind->name, *f);
      kd->short_of[(*f)[0] - 'a'] = (char) idx;
    }
  g_auto (GStrv) groups = g_strsplit (kind->one_of ? kind->one_of : "", ";", -1);
  guint ng = g_strv_length (groups);
  kd->groups = g_new0 (char **, ng + 1);
  guint k = 0;
  for (guint g = 0; g < ng; g++)
    {
      if (!*groups[g])
        continue;
      kd->groups[k] = g_strsplit (groups[g], "|", -1);
      for (char **m = kd->groups[k]; *m; m++)
        if (!g_hash_table_contains (kd->by_name, *m))
          g_error ("job kind %s: group names --%s, which the kind does not take", kind->name, *m);
      k++;
    }
}

static void
ensure_tables (void)
{
  static gsize once = 0;
  if (g_once_init_enter (&once))
    {
      guint n_jobs = 0, n_commands = 0;
      while (hn_job_kind_table[n_jobs].name)
        n_jobs++;
      while (hn_command_table[n_commands].name)
        n_commands++;
      guint n = n_jobs + n_commands;
      KindData *kds = g_new0 (KindData, n);
      for (guint i = 0; i < n_jobs; i++)
        build_kind (&kds[i], &hn_job_kind_table[i]);
      for (guint i = 0; i < n_commands; i++)
        {
          build_kind (&kds[n_jobs + i], &hn_command_table[i]);
          kds[n_jobs + i].command = TRUE;
        }
      for (guint i = 0; i < n; i++)
        for (guint j = 0; j < i; j++)
          if (strcmp (kds[i].kind->name, kds[j].kind->name) == 0)
            g_error ("%s is both a job kind and a command", kds[i].kind->name);
      kind_data = kds;
      n_kinds = n;
      g_once_init_leave (&once, 1);
    }
}

static gboolean
word_in_list (const char *list, const char *word)
{
  if (!list)
    return FALSE;
  gsize len = strlen (word);
  for (const char *p = list; *p;)
    {
      const char *end = strchr (p, ' ');
      gsize n = end ? (gsize) (end - p) : strlen (p);
      if (n == len && strncmp (p, word, n) == 0)
        return TRUE;
      if (!end)
        break;
      p = end + 1;
    }
  return FALSE;
}

static KindData *
kind_data_lookup (const char *name)
{
  ensure_tables ();
  for (guint i = 0; i < n_kinds; i++)
    if (strcmp (kind_data[i].kind->name, name) == 0 || word_in_list (kind_data[i].kind->aliases, name))
      return &kind_data[i];
  return NULL;
}

const HnJobKindInfo *
hn_job_kind_lookup (const char *name)
{
  KindData *kd = name ? kind_data_lookup (name) : NULL;
  return kd && !kd->command ? kd->kind : NULL;
}

const HnJobKindInfo *
hn_command_lookup (const char *name)
{
  KindData *kd = name ? kind_data_lookup (name) : NULL;
  return kd && kd->command ? kd->kind : NULL;
}


/* ---- values ----------------------------------------------------------- */

static void
value_clear (Value *v)
{
  g_clear_pointer (&v->s, g_free);
  g_clear_pointer (&v->v, g_ptr_array_unref);
  memset (v, 0, sizeof *v);
}

static void
value_copy (const Value *src, Value *dst)
{
  *dst = *src;
  dst->s = g_strdup (src->s);
  dst->v = NULL;
  if (src->v)
    {
      dst->v = g_ptr_array_new_with_free_func (g_free);
      for (guint i = 0; i + 1 < src->v->len; i++)
        g_ptr_array_add (dst->v, g_strdup (g_ptr_array_index (src->v, i)));
      g_ptr_array_add (dst->v, NULL);
    }
}

static gboolean
value_equal (HnOptionType type, const Value *a, const Value *b)
{
  switch (type)
    {
    case HN_OPTION_STRING:
    case HN_OPTION_CHOICE:
      return g_strcmp0 (a->s, b->s) == 0;
    case HN_OPTION_INT:
      return a->i == b->i;
    case HN_OPTION_DOUBLE:
      return a->d == b->d || (isnan (a->d) && isnan (b->d));
    case HN_OPTION_BOOL:
      return !a->b == !b->b;
    case HN_OPTION_STRINGV:
      {
        guint na = a->v ? a->v->len - 1 : 0, nb = b->v ? b->v->len - 1 : 0;
        if (na != nb)
          return FALSE;
        for (guint i = 0; i < na; i++)
          if (g_strcmp0 (g_ptr_array_index (a->v, i), g_ptr_array_index (b->v, i)) != 0)
            return FALSE;
        return TRUE;
      }
    }
  return FALSE;
}

/* Shortest text that reads back to the same double: "5e-05", not
 * "5.0000000000000002e-05". */
static char *
format_double (double d)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  if (d == floor (d) && fabs (d) < 1e15)
    return g_strdup_printf ("%.0f", d); /* "10", not "1e+01" */
  for (int prec = 1; prec <= 17; prec++)
    {
      char fmt[8];
      g_snprintf (fmt, sizeof fmt, "%%.%dg", prec);
      g_ascii_formatd (buf, sizeof buf, fmt, d);
      if (g_ascii_strtod (buf, NULL) == d)
        break;
    }
  return g_strdup (buf);
}

static char *
describe_range (const HnOptionInfo *o)
{
  g_autofree char *lo = o->type == HN_OPTION_INT ? g_strdup_printf ("%.0f", o->min) : format_double (o->min);
  g_autofree char *hi = o->type == HN_OPTION_INT ? g_strdup_printf ("%.0f", o->max) : format_double (o->max);
  const char *lo_word = (o->flags & HN_OPTION_MIN_EXCLUSIVE) ? "greater than" : "at least";
  const char *hi_word = (o->flags & HN_OPTION_MAX_EXCLUSIVE) ? "less than" : "at most";
  if (o->max >= 1e9)
    return g_strdup_printf ("%s %s", lo_word, lo);
  return g_strdup_printf ("%s %s and %s %s", lo_word, lo, hi_word, hi);
}

static gboolean
check_range (const HnOptionInfo *o, double x, const char *text, GError **error)
{
  if (o->min > o->max)
    return TRUE;
  gboolean ok = (o->flags & HN_OPTION_MIN_EXCLUSIVE) ? x > o->min : x >= o->min;
  ok = ok && ((o->flags & HN_OPTION_MAX_EXCLUSIVE) ? x < o->max : x <= o->max);
  if (!ok)
    {
      g_autofree char *range = describe_range (o);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "--%s: %s is out of range: it must be %s", o->name, text, range);
    }
  return ok;
}

static gboolean
parse_bool (const char *text, gboolean *out)
{
  static const char *const yes[] = { "true", "1", "yes", "on", NULL };
  static const char *const no[] = { "false", "0", "no", "off", NULL };
  for (int i = 0; yes[i]; i++)
    if (g_ascii_strcasecmp (text, yes[i]) == 0)
      return (*out = TRUE), TRUE;
  for (int i = 0; no[i]; i++)
    if (g_ascii_strcasecmp (text, no[i]) == 0)
      return (*out = FALSE), TRUE;
  return FALSE;
}

/* Parses text into *out (a fresh Value; for STRINGV a one-element list) and
 * checks the range/choices. */
static gboolean
parse_value (const HnOptionInfo *o, const char *text, Value *out, GError **error)
{
  memset (out, 0, sizeof *out);
  out->set = TRUE;
  switch (o->type)
    {
    case HN_OPTION_STRING:
      out->s = g_strdup (text);
      return TRUE;
    case HN_OPTION_CHOICE:
      if (!word_in_list (o->choices, text))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "--%s: '%s' is not one of %s", o->name, text, o->choices);
          return FALSE;
        }
      out->s = g_strdup (text);
      return TRUE;
    case HN_OPTION_INT:
      {
        GError *local = NULL;
        gint64 v;
        if (!g_ascii_string_to_signed (text, 10, G_MININT64, G_MAXINT64, &v, &local))
          {
            if (o->hint == HN_OPTION_HINT_DEVICE && g_ascii_strcasecmp (text, "cpu") == 0)
              g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                           "--%s: 'cpu' is not a Vulkan device; --runtime cpu runs Hierarchos models on the CPU",
                           o->name);
            else
              g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                           "--%s: '%s' is not a whole number", o->name, text);
            g_error_free (local);
            return FALSE;
          }
        out->i = v;
        return check_range (o, (double) v, text, error);
      }
    case HN_OPTION_DOUBLE:
      {
        char *end = NULL;
        errno = 0;
        double v = g_ascii_strtod (text, &end);
        if (!*text || !end || *end != '\0' || errno == ERANGE || !isfinite (v))
          {
            g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                         "--%s: '%s' is not a finite number", o->name, text);
            return FALSE;
          }
        out->d = v;
        return check_range (o, v, text, error);
      }
    case HN_OPTION_BOOL:
      if (!parse_bool (text, &out->b))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "--%s: '%s' is not true or false", o->name, text);
          return FALSE;
        }
      return TRUE;
    case HN_OPTION_STRINGV:
      out->v = g_ptr_array_new_with_free_func (g_free);
      g_ptr_array_add (out->v, g_strdup (text));
      g_ptr_array_add (out->v, NULL);
      return TRUE;
    }
  return FALSE;
}

/* ---- the object ------------------------------------------------------- */

struct _HnJobSpec
{
  GObject parent_instance;
  KindData *kd;
  Value *values; /* kd->n_options */
};

enum { PROP_0, PROP_KIND, N_PROPS };
static GParamSpec *properties[N_PROPS];
enum { CHANGED, N_SIGNALS };
static guint signals[N_SIGNALS];

G_DEFINE_FINAL_TYPE (HnJobSpec, hn_job_spec, G_TYPE_OBJECT)

static void
hn_job_spec_finalize (GObject *object)
{
  HnJobSpec *self = HN_JOB_SPEC (object);
  if (self->values)
    for (guint i = 0; i < self->kd->n_options; i++)
      value_clear (&self->values[i]);
  g_free (self->values);
  G_OBJECT_CLASS (hn_job_spec_parent_class)->finalize (object);
}

static void
hn_job_spec_set_property (GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec)
{
  HnJobSpec *self = HN_JOB_SPEC (object);
  switch (prop_id)
    {
    case PROP_KIND:
      {
        const char *kind = g_value_get_string (value);
        self->kd = kind ? kind_data_lookup (kind) : NULL;
        if (!self->kd) /* hn_job_spec_new checks first; g_object_new callers get a usable object */
          self->kd = kind_data_lookup (hn_job_kind_table[0].name);
        self->values = g_new0 (Value, self->kd->n_options);
      }
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_job_spec_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  HnJobSpec *self = HN_JOB_SPEC (object);
  switch (prop_id)
    {
    case PROP_KIND:
      g_value_set_string (value, self->kd->kind->name);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_job_spec_class_init (HnJobSpecClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  object_class->finalize = hn_job_spec_finalize;
  object_class->set_property = hn_job_spec_set_property;
  object_class->get_property = hn_job_spec_get_property;
  properties[PROP_KIND] = g_param_spec_string ("kind", NULL, NULL, NULL,
                                               G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);
  /* "changed::NAME" (NAME = the canonical option name) after a value changed. */
  signals[CHANGED] = g_signal_new ("changed", G_TYPE_FROM_CLASS (klass),
                                   G_SIGNAL_RUN_LAST | G_SIGNAL_DETAILED, 0, NULL, NULL, NULL,
                                   G_TYPE_NONE, 1, G_TYPE_STRING);
}

static void
hn_job_spec_init (HnJobSpec *self)
{
}

HnJobSpec *
hn_job_spec_new (const char *kind, GError **error)
{
  KindData *kd = kind ? kind_data_lookup (kind) : NULL;
  if (!kd)
    {
      GString *known = g_string_new (NULL);
      for (guint i = 0; i < n_kinds; i++)
        if (!kind_data[i].command)
          g_string_append_printf (known, "%s%s", known->len ? ", " : "", kind_data[i].kind->name);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "unknown job kind '%s' (known: %s)", kind ? kind : "(null)", known->str);
      g_string_free (known, TRUE);
      return NULL;
    }
  return g_object_new (HN_TYPE_JOB_SPEC, "kind", kd->kind->name, NULL);
}

HnJobSpec *
hn_job_spec_copy (HnJobSpec *self)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (self), NULL);
  HnJobSpec *copy = g_object_new (HN_TYPE_JOB_SPEC, "kind", self->kd->kind->name, NULL);
  for (guint i = 0; i < self->kd->n_options; i++)
    value_copy (&self->values[i], &copy->values[i]);
  return copy;
}

gboolean
hn_job_spec_equal (HnJobSpec *a, HnJobSpec *b)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (a) && HN_IS_JOB_SPEC (b), FALSE);
  if (a->kd != b->kd)
    return FALSE;
  for (guint i = 0; i < a->kd->n_options; i++)
    {
      if (!a->values[i].set != !b->values[i].set)
        return FALSE;
      if (a->values[i].set && !value_equal (a->kd->options[i].type, &a->values[i], &b->values[i]))
        return FALSE;
    }
  return TRUE;
}

const char *
hn_job_spec_get_kind (HnJobSpec *self)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (self), NULL);
  return self->kd->kind->name;
}

const HnJobKindInfo *
hn_job_spec_get_kind_info (HnJobSpec *self)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (self), NULL);
  return self->kd->kind;
}

gboolean
hn_job_spec_is_command (HnJobSpec *self)
{
  return self->kd->command;
}

const HnOptionInfo *
hn_job_spec_get_options (HnJobSpec *self, guint *n_options)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (self), NULL);
  if (n_options)
    *n_options = self->kd->n_options;
  return self->kd->options;
}

static int
option_index (HnJobSpec *self, const char *name)
{
  g_autofree char *n = normalize_name (name);
  gpointer p = g_hash_table_lookup (self->kd->by_name, n);
  return p ? (int) GPOINTER_TO_UINT (p) - 1 : -1;
}

const HnOptionInfo *
hn_job_spec_lookup (HnJobSpec *self, const char *name)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (self) && name, NULL);
  int i = option_index (self, name);
  return i < 0 ? NULL : &self->kd->options[i];
}

/* The value in effect (set or default), after checking name and type. */
static const Value *
effective (HnJobSpec *self, const char *name, HnOptionType type, int *index)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (self) && name, NULL);
  int i = option_index (self, name);
  if (i < 0)
    {
      g_critical ("job kind %s has no option --%s", self->kd->kind->name, name);
      return NULL;
    }
  HnOptionType t = self->kd->options[i].type;
  gboolean ok = t == type || (type == HN_OPTION_STRING && t == HN_OPTION_CHOICE);
  if (!ok)
    {
      g_critical ("option --%s of %s has another type", name, self->kd->kind->name);
      return NULL;
    }
  if (index)
    *index = i;
  return self->values[i].set ? &self->values[i] : &self->kd->defaults[i];
}

const char *
hn_job_spec_get_string (HnJobSpec *self, const char *name)
{
  const Value *v = effective (self, name, HN_OPTION_STRING, NULL);
  return v ? v->s : NULL;
}

gint64
hn_job_spec_get_int (HnJobSpec *self, const char *name)
{
  const Value *v = effective (self, name, HN_OPTION_INT, NULL);
  return v ? v->i : 0;
}

double
hn_job_spec_get_double (HnJobSpec *self, const char *name)
{
  const Value *v = effective (self, name, HN_OPTION_DOUBLE, NULL);
  return v ? v->d : 0.0;
}

gboolean
hn_job_spec_get_bool (HnJobSpec *self, const char *name)
{
  const Value *v = effective (self, name, HN_OPTION_BOOL, NULL);
  return v ? v->b : FALSE;
}

const char *const *
hn_job_spec_get_strv (HnJobSpec *self, const char *name)
{
  static const char *const empty[] = { NULL };
  const Value *v = effective (self, name, HN_OPTION_STRINGV, NULL);
  return (v && v->v) ? (const char *const *) v->v->pdata : empty;
}

gboolean
hn_job_spec_is_set (HnJobSpec *self, const char *name)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (self) && name, FALSE);
  int i = option_index (self, name);
  return i >= 0 && self->values[i].set;
}

/* Stores `nv` (taken) at index i: an ordinary option equal to its default
 * becomes unset; emits changed if anything changed. */
static void
store (HnJobSpec *self, int i, Value *nv)
{
  const HnOptionInfo *o = &self->kd->options[i];
  Value *cur = &self->values[i];
  /* equal to the default: unset (an option without a default keeps any value, 0 included) */
  if (nv->set && !(o->flags & HN_OPTION_MODEL_DEFAULT) && self->kd->defaults[i].set &&
      value_equal (o->type, nv, &self->kd->defaults[i]))
    value_clear (nv);
  if (nv->set && (o->type == HN_OPTION_STRING || o->type == HN_OPTION_CHOICE) && (!nv->s || !*nv->s))
    value_clear (nv);
  if (nv->set && o->type == HN_OPTION_STRINGV && (!nv->v || nv->v->len <= 1))
    value_clear (nv);
  gboolean changed = !cur->set != !nv->set || (cur->set && !value_equal (o->type, cur, nv));
  value_clear (cur);
  *cur = *nv;
  if (changed)
    g_signal_emit (self, signals[CHANGED], g_quark_from_string (o->name), o->name);
}

static int
setter_index (HnJobSpec *self, const char *name, HnOptionType type)
{
  int i = -1;
  if (!effective (self, name, type, &i))
    return -1;
  return i;
}

void
hn_job_spec_set_string (HnJobSpec *self, const char *name, const char *value)
{
  int i = setter_index (self, name, HN_OPTION_STRING);
  if (i < 0)
    return;
  Value nv = { .set = value != NULL, .s = g_strdup (value) };
  store (self, i, &nv);
}

void
hn_job_spec_set_int (HnJobSpec *self, const char *name, gint64 value)
{
  int i = setter_index (self, name, HN_OPTION_INT);
  if (i < 0)
    return;
  Value nv = { .set = TRUE, .i = value };
  store (self, i, &nv);
}

void
hn_job_spec_set_double (HnJobSpec *self, const char *name, double value)
{
  int i = setter_index (self, name, HN_OPTION_DOUBLE);
  if (i < 0)
    return;
  Value nv = { .set = TRUE, .d = value };
  store (self, i, &nv);
}

void
hn_job_spec_set_bool (HnJobSpec *self, const char *name, gboolean value)
{
  int i = setter_index (self, name, HN_OPTION_BOOL);
  if (i < 0)
    return;
  Value nv = { .set = TRUE, .b = !!value };
  store (self, i, &nv);
}

void
hn_job_spec_set_strv (HnJobSpec *self, const char *name, const char *const *value)
{
  int i = setter_index (self, name, HN_OPTION_STRINGV);
  if (i < 0)
    return;
  Value nv = { .set = value && *value };
  if (nv.set)
    {
      nv.v = g_ptr_array_new_with_free_func (g_free);
      for (const char *const *p = value; *p; p++)
        g_ptr_array_add (nv.v, g_strdup (*p));
      g_ptr_array_add (nv.v, NULL);
    }
  store (self, i, &nv);
}

void
hn_job_spec_unset (HnJobSpec *self, const char *name)
{
  g_return_if_fail (HN_IS_JOB_SPEC (self) && name);
  int i = option_index (self, name);
  if (i < 0)
    {
      g_critical ("job kind %s has no option --%s", self->kd->kind->name, name);
      return;
    }
  Value nv = { .set = FALSE };
  store (self, i, &nv);
}

gboolean
hn_job_spec_set_from_string (HnJobSpec *self, const char *name, const char *text, GError **error)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (self) && name && text, FALSE);
  int i = option_index (self, name);
  if (i < 0)
    {
      g_autofree char *n = normalize_name (name);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s does not take --%s (see '%s %s --help')", self->kd->kind->name, n,
                   HN_CLI_PROGRAM, self->kd->kind->name);
      return FALSE;
    }
  const HnOptionInfo *o = &self->kd->options[i];
  Value nv;
  if (!parse_value (o, text, &nv, error))
    {
      value_clear (&nv);
      return FALSE;
    }
  if (o->type == HN_OPTION_STRINGV && self->values[i].set)
    {
      /* repeatable: append to what is there */
      Value joined;
      value_copy (&self->values[i], &joined);
      g_ptr_array_remove_index (joined.v, joined.v->len - 1);
      g_ptr_array_add (joined.v, g_strdup (text));
      g_ptr_array_add (joined.v, NULL);
      value_clear (&nv);
      nv = joined;
    }
  store (self, i, &nv);
  return TRUE;
}

static char *
value_text (const HnOptionInfo *o, const Value *v)
{
  switch (o->type)
    {
    case HN_OPTION_STRING:
    case HN_OPTION_CHOICE:
      return g_strdup (v->s ? v->s : "");
    case HN_OPTION_INT:
      return g_strdup_printf ("%" G_GINT64_FORMAT, v->i);
    case HN_OPTION_DOUBLE:
      return format_double (v->d);
    case HN_OPTION_BOOL:
      return g_strdup (v->b ? "true" : "false");
    case HN_OPTION_STRINGV:
      return v->v ? g_strjoinv (",", (char **) v->v->pdata) : g_strdup ("");
    }
  return g_strdup ("");
}

char *
hn_job_spec_value_to_string (HnJobSpec *self, const char *name)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (self) && name, NULL);
  int i = option_index (self, name);
  if (i < 0)
    return NULL;
  return value_text (&self->kd->options[i], self->values[i].set ? &self->values[i] : &self->kd->defaults[i]);
}

gboolean
hn_job_spec_check_option (HnJobSpec *self, const char *name, GError **error)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (self) && name, FALSE);
  int i = option_index (self, name);
  if (i < 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s does not take --%s",
                   self->kd->kind->name, name);
      return FALSE;
    }
  const HnOptionInfo *o = &self->kd->options[i];
  const Value *v = self->values[i].set ? &self->values[i] : &self->kd->defaults[i];
  if (!v->set)
    return TRUE;
  g_autofree char *text = value_text (o, v);
  if (o->type == HN_OPTION_INT)
    return check_range (o, (double) v->i, text, error);
  if (o->type == HN_OPTION_DOUBLE)
    {
      if (!isfinite (v->d))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--%s: %s is not a finite number",
                       o->name, text);
          return FALSE;
        }
      return check_range (o, v->d, text, error);
    }
  if (o->type == HN_OPTION_CHOICE && !word_in_list (o->choices, v->s))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--%s: '%s' is not one of %s",
                   o->name, text, o->choices);
      return FALSE;
    }
  if (o->hint == HN_OPTION_HINT_DEVICES)
    {
      g_autoptr (GError) local = NULL;
      g_autoptr (GArray) devs = hn_parse_device_indices (v->s, &local);
      if (!devs)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--%s %s: %s", o->name, text, local->message);
          return FALSE;
        }
    }
  return TRUE;
}

GArray *
hn_parse_device_indices (const char *text, GError **error)
{
  g_autoptr (GArray) out = g_array_new (FALSE, FALSE, sizeof (int));
  g_auto (GStrv) parts = g_strsplit (text ? text : "", ",", -1);
  for (char **p = parts; *p; p++)
    {
      const char *w = g_strstrip (*p);
      guint64 v = 0;
      if (!g_ascii_string_to_unsigned (w, 10, 0, 1024, &v, NULL))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "'%s' is not a device index (a comma-separated list of numbers from `devices`, such as 0,1)", w);
          return NULL;
        }
      int i = (int) v;
      g_array_append_val (out, i);
    }
  if (out->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "the device list is empty (give indices such as 0,1)");
      return NULL;
    }
  return g_steal_pointer (&out);
}

GArray *
hn_job_spec_get_devices (HnJobSpec *self, GError **error)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (self), NULL);
  gboolean many = hn_job_spec_lookup (self, "device-indices") && hn_job_spec_is_set (self, "device-indices");
  if (many && hn_job_spec_is_set (self, "device-index"))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "give either --device-index or --device-indices, not both");
      return NULL;
    }
  if (many)
    {
      g_autoptr (GError) local = NULL;
      GArray *devs = hn_parse_device_indices (hn_job_spec_get_string (self, "device-indices"), &local);
      if (!devs)
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--device-indices: %s", local->message);
      return devs;
    }
  GArray *one = g_array_new (FALSE, FALSE, sizeof (int));
  int i = (int) hn_job_spec_get_int (self, "device-index");
  g_array_append_val (one, i);
  return one;
}

gboolean
hn_job_spec_validate (HnJobSpec *self, GError **error)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (self), FALSE);
  for (guint i = 0; i < self->kd->n_options; i++)
    if (!hn_job_spec_check_option (self, self->kd->options[i].name, error))
      return FALSE;
  for (char ***g = self->kd->groups; *g; g++)
    {
      guint n_set = 0;
      GString *names = g_string_new (NULL);
      guint n = g_strv_length (*g);
      for (guint k = 0; k < n; k++)
        {
          if (hn_job_spec_is_set (self, (*g)[k]))
            n_set++;
          g_string_append_printf (names, "%s--%s", k == 0 ? "" : (k + 1 == n ? " or " : ", "), (*g)[k]);
        }
      if (n_set != 1)
        {
          if (n_set == 0)
            g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s needs %s",
                         self->kd->kind->name, names->str);
          else
            g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s takes only one of %s",
                         self->kd->kind->name, names->str);
          g_string_free (names, TRUE);
          return FALSE;
        }
      g_string_free (names, TRUE);
    }
  return TRUE;
}

/* ---- argv ------------------------------------------------------------- */

char **
hn_job_spec_to_argv (HnJobSpec *self, HnArgvFlags flags)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (self), NULL);
  GPtrArray *argv = g_ptr_array_new ();
  if (flags & HN_ARGV_WITH_PROGRAM)
    g_ptr_array_add (argv, g_strdup (HN_CLI_PROGRAM));
  g_ptr_array_add (argv, g_strdup (self->kd->kind->name));
  for (guint i = 0; i < self->kd->n_options; i++)
    {
      const HnOptionInfo *o = &self->kd->options[i];
      const Value *v = &self->values[i];
      if (!v->set)
        continue;
      gboolean mask = (o->flags & HN_OPTION_SECRET) && !(flags & HN_ARGV_UNMASKED);
      switch (o->type)
        {
        case HN_OPTION_BOOL:
          g_ptr_array_add (argv, v->b ? g_strdup_printf ("--%s", o->name) : g_strdup_printf ("--%s=false", o->name));
          break;
        case HN_OPTION_STRINGV:
          for (guint k = 0; v->v && k + 1 < v->v->len; k++)
            {
              g_ptr_array_add (argv, g_strdup_printf ("--%s", o->name));
              g_ptr_array_add (argv, g_strdup (mask ? HN_JOB_SPEC_MASK : g_ptr_array_index (v->v, k)));
            }
          break;
        default:
          g_ptr_array_add (argv, g_strdup_printf ("--%s", o->name));
          g_ptr_array_add (argv, mask ? g_strdup (HN_JOB_SPEC_MASK) : value_text (o, v));
        }
    }
  g_ptr_array_add (argv, NULL);
  return (char **) g_ptr_array_free (argv, FALSE);
}

static gboolean
needs_quoting (const char *s)
{
  if (!*s)
    return TRUE;
  for (const char *p = s; *p; p++)
    if (!g_ascii_isalnum (*p) && !strchr ("_-./:=,@%+", *p))
      return TRUE;
  return FALSE;
}

char *
hn_job_spec_to_command_line (HnJobSpec *self, HnArgvFlags flags)
{
  g_auto (GStrv) argv = hn_job_spec_to_argv (self, flags);
  GString *s = g_string_new (NULL);
  for (char **a = argv; *a; a++)
    {
      if (a != argv)
        g_string_append_c (s, ' ');
      if (needs_quoting (*a))
        {
          g_autofree char *q = g_shell_quote (*a);
          g_string_append (s, q);
        }
      else
        g_string_append (s, *a);
    }
  return g_string_free (s, FALSE);
}

static gboolean
looks_like_flag (const char *s)
{
  return s[0] == '-' && s[1] == '-' && s[2] != '\0';
}

/* "-t": the option a kind's one-letter flag stands for, or NULL */
static const HnOptionInfo *
short_flag (HnJobSpec *spec, const char *s)
{
  if (s[0] != '-' || s[1] < 'a' || s[1] > 'z' || !spec->kd->short_of[s[1] - 'a'])
    return NULL;
  return &spec->kd->options[spec->kd->short_of[s[1] - 'a'] - 1];
}

/* "--name X": X is the value unless it is a flag of this kind; a text value
 * may start with "--" when no such flag exists. */
static gboolean
next_is_value (HnJobSpec *spec, const HnOptionInfo *o, const char *next)
{
  if (short_flag (spec, next) && next[2] == '\0')
    return FALSE;
  if (!looks_like_flag (next))
    return TRUE;
  if (o->type != HN_OPTION_STRING && o->type != HN_OPTION_STRINGV)
    return FALSE;
  g_autofree char *name = g_strdup (next);
  char *eq = strchr (name, '=');
  if (eq)
    *eq = '\0';
  return hn_job_spec_lookup (spec, name) == NULL && strcmp (name, "--help") != 0 &&
         strcmp (name, "--json-events") != 0;
}

HnJobSpec *
hn_job_spec_new_from_argv (int argc, const char *const *argv, GError **error)
{
  if (argc < 1 || !argv || !argv[0])
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "no job kind given");
      return NULL;
    }
  g_autoptr (HnJobSpec) spec = hn_job_spec_new (argv[0], error);
  if (!spec)
    return NULL;
  /* an option of one value given twice is an error, never a silent last-wins */
  g_autofree gboolean *given = g_new0 (gboolean, spec->kd->n_options);
  for (int i = 1; i < argc; i++)
    {
      const char *arg = argv[i];
      const HnOptionInfo *so = short_flag (spec, arg);
      if (so)
        {
          /* "-t VALUE" or "-tVALUE" */
          int idx = option_index (spec, so->name);
          if (given[idx] && so->type != HN_OPTION_STRINGV)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                           "-%c (--%s) is given twice; it takes one value", arg[1], so->name);
              return NULL;
            }
          given[idx] = TRUE;
          const char *value = arg[2] ? arg + 2 : NULL;
          if (!value && so->type == HN_OPTION_BOOL)
            value = "true";
          else if (!value && i + 1 < argc && next_is_value (spec, so, argv[i + 1]))
            value = argv[++i];
          else if (!value)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "-%c (--%s) needs a value", arg[1], so->name);
              return NULL;
            }
          if (!hn_job_spec_set_from_string (spec, so->name, value, error))
            return NULL;
          continue;
        }
      if (!looks_like_flag (arg))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "unexpected argument '%s' (options are written --name value)", arg);
          return NULL;
        }
      g_autofree char *name = NULL;
      const char *eq = strchr (arg, '=');
      const char *value = NULL;
      if (eq)
        {
          name = g_strndup (arg, (gsize) (eq - arg));
          value = eq + 1;
        }
      else
        name = g_strdup (arg);
      const HnOptionInfo *o = hn_job_spec_lookup (spec, name);
      if (!o)
        {
          g_autofree char *n = normalize_name (name);
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "unknown option --%s for %s (see '%s %s --help')", n, spec->kd->kind->name,
                       HN_CLI_PROGRAM, spec->kd->kind->name);
          return NULL;
        }
      int idx = option_index (spec, o->name);
      if (given[idx] && o->type != HN_OPTION_STRINGV)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "--%s is given twice; it takes one value (only list options such as --prompt repeat)", o->name);
          return NULL;
        }
      given[idx] = TRUE;
      if (!value)
        {
          if (o->type == HN_OPTION_BOOL)
            value = "true";
          else if (i + 1 < argc && next_is_value (spec, o, argv[i + 1]))
            value = argv[++i];
          else
            {
              g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--%s needs a value", o->name);
              return NULL;
            }
        }
      if (!hn_job_spec_set_from_string (spec, o->name, value, error))
        return NULL;
    }
  return g_steal_pointer (&spec);
}

/* ---- --help ----------------------------------------------------------- */

static const char *
type_metavar (const HnOptionInfo *o)
{
  if (o->metavar)
    return o->metavar;
  switch (o->type)
    {
    case HN_OPTION_INT: return "N";
    case HN_OPTION_DOUBLE: return "X";
    case HN_OPTION_CHOICE: return "CHOICE";
    default: return "TEXT";
    }
}

void
hn_job_spec_print_help (const HnJobKindInfo *kind, FILE *out)
{
  g_return_if_fail (kind != NULL);
  g_autoptr (HnJobSpec) spec = hn_job_spec_new (kind->name, NULL);
  fprintf (out, "Usage: %s %s [OPTIONS...]\n\n%s.\n", HN_CLI_PROGRAM, kind->name, kind->summary);
  if (kind->aliases)
    fprintf (out, "Also called: %s\n", kind->aliases);
  fprintf (out, "\nOptions:\n");
  for (guint i = 0; i < spec->kd->n_options; i++)
    {
      const HnOptionInfo *o = &spec->kd->options[i];
      char letter = 0;
      for (int c = 0; c < 26; c++)
        if (spec->kd->short_of[c] == (char) (i + 1))
          letter = (char) ('a' + c);
      g_autofree char *shortf = letter ? g_strdup_printf ("-%c, ", letter) : g_strdup ("");
      g_autofree char *flag = o->type == HN_OPTION_BOOL ? g_strdup_printf ("%s--%s", shortf, o->name)
                                                         : g_strdup_printf ("%s--%s %s", shortf, o->name, type_metavar (o));
      GString *h = g_string_new (o->help);
      const Value *d = &spec->kd->defaults[i];
      if (o->type == HN_OPTION_CHOICE)
        g_string_append_printf (h, "; one of: %s", o->choices);
      if (d->set && o->type != HN_OPTION_BOOL)
        {
          g_autofree char *t = value_text (o, d);
          g_string_append_printf (h, " (default %s)", t);
        }
      if (d->set && o->type == HN_OPTION_BOOL && d->b)
        g_string_append_printf (h, " (on by default; --%s=false turns it off)", o->name);
      if ((o->type == HN_OPTION_INT || o->type == HN_OPTION_DOUBLE) && o->min <= o->max)
        {
          g_autofree char *r = describe_range (o);
          g_string_append_printf (h, " [%s]", r);
        }
      if (o->type == HN_OPTION_STRINGV)
        g_string_append (h, " [repeatable]");
      if (o->aliases)
        g_string_append_printf (h, " (also --%s)", o->aliases);
      fprintf (out, "  %-34s %s\n", flag, h->str);
      g_string_free (h, TRUE);
    }
  if (kind->one_of && *kind->one_of)
    {
      fprintf (out, "\nRequired, exactly one of each:");
      g_auto (GStrv) groups = g_strsplit (kind->one_of, ";", -1);
      for (char **g = groups; *g; g++)
        {
          g_auto (GStrv) m = g_strsplit (*g, "|", -1);
          g_autofree char *j = g_strjoinv (" | --", m);
          fprintf (out, "  --%s%s", j, g[1] ? ";" : "\n");
        }
    }
  fprintf (out, "\nUnderscore spellings (--batch_size) are accepted for every option.\n");
  if (!spec->kd->command)
    fprintf (out, "  %-34s %s\n", "--json-events", "Print progress, metrics and tokens as JSON lines");
  fprintf (out, "  %-34s %s\n", "-h, --help", "Show this help");
  if (g_str_equal (kind->name, "transformer-train") || g_str_equal (kind->name, "transformer-finetune") ||
      g_str_equal (kind->name, "transformer-generate"))
    fprintf (out, "  %-34s %s\n", "--dry-run [--json]",
             "Print the device memory the job would need against the free memory, and stop");
}
