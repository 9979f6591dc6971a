/*
 * GM's utility modules called from C as GM programs call them: a hash
 * table of int keys and struct data kept by the table, one of string
 * keys kept by the program, a lookaside list, a mutex and a mark set.
 * Prints "modules: ok" and exits 0 when every answer is right.
 */

#include <stdio.h>
#include <string.h>

#include "gm.h"

struct big {
  int a;
  double b;
  char c[20];
};

static int failures;

static void expect(int ok, const char *what)
{
  if (!ok) {
    fprintf(stderr, "modules: %s\n", what);
    failures++;
  }
}

int main(void)
{
  struct gm_hash *h = gm_create_hash(gm_hash_compare_ints, gm_hash_hash_int, sizeof(int),
                                     sizeof(struct big), 100, 0);
  struct gm_hash *names;
  struct gm_lookaside *l;
  struct gm_mutex *mu;
  struct gm_mark_set *set;
  gm_mark_t m1, m2;
  int k, value = 7;
  char *p;

  for (k = 0; k < 1000; k++) {
    struct big b;
    b.a = k;
    b.b = k * 0.5;
    sprintf(b.c, "entry %d", k);
    expect(gm_hash_insert(h, &k, &b) == GM_SUCCESS, "insert");
  }
  for (k = 0; k < 1000; k += 37) {
    struct big *b = gm_hash_find(h, &k);
    char want[20];
    sprintf(want, "entry %d", k);
    expect(b && b->a == k && b->b == k * 0.5 && !strcmp(b->c, want), "find a copied entry");
  }
  k = 500;
  expect(gm_hash_remove(h, &k) != NULL, "remove");
  expect(gm_hash_find(h, &k) == NULL, "a removed key is gone");
  k = 1000;
  expect(gm_hash_find(h, &k) == NULL, "a key never inserted");
  gm_destroy_hash(h);

  names = gm_create_hash(gm_hash_compare_strings, gm_hash_hash_string, 0, 0, 0, 0);
  gm_hash_insert(names, "node0", &value);
  {
    char key[] = "node0";
    expect(gm_hash_find(names, key) == &value, "the client's datum pointer back");
  }
  gm_destroy_hash(names);

  l = gm_create_lookaside(200, 8);
  p = gm_lookaside_zalloc(l);
  expect(p && GM_ALIGNED(p, 64) && p[0] == 0 && p[199] == 0, "a zeroed, aligned block");
  memset(p, 1, 200);
  gm_lookaside_free(p);
  gm_destroy_lookaside(l);

  mu = gm_create_mutex();
  gm_mutex_enter(mu);
  gm_mutex_exit(mu);
  gm_destroy_mutex(mu);

  expect(gm_create_mark_set(&set, 4) == GM_SUCCESS, "a mark set");
  gm_mark(set, &m1);
  gm_mark(set, &m2);
  expect(gm_mark_is_valid(set, &m1) && gm_mark_is_valid(set, &m2) && m1 != m2, "two marks");
  gm_unmark(set, &m1);
  expect(!gm_mark_is_valid(set, &m1) && gm_mark_is_valid(set, &m2), "one unmarked");
  gm_unmark_all(set);
  expect(!gm_mark_is_valid(set, &m2), "all unmarked");
  gm_destroy_mark_set(set);

  if (!failures)
    printf("modules: ok\n");
  return failures ? 1 : 0;
}
