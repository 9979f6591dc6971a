/* The calls of GM's interface that take C variadic arguments. */

#include <stdarg.h>
#include <stdio.h>

#include "gm.h"

int gm_printf(const char *format, ...)
{
  va_list ap;
  int n;
  va_start(ap, format);
  n = vprintf(format, ap);
  va_end(ap);
  return n;
}

/* As gm_printf, to standard error (GM's "eprintf"). */
int gm_eprintf(const char *format, ...)
{
  va_list ap;
  int n;
  va_start(ap, format);
  n = vfprintf(stderr, format, ap);
  va_end(ap);
  return n;
}
