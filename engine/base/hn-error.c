#include "base/hn-error.h"

G_DEFINE_QUARK (hn-error-quark, hn_error)
