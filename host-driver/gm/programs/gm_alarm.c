/*
 * gm_alarm: GM's alarms, in the manner of GM's own tests. Written only
 * against GM's interface (gm.h).
 *
 *   gm_alarm [-p port]
 *
 * One process is enough (NIC_CLUSTER and NIC_NODE say where it runs);
 * several can run at once on different nodes, each on its own. It sets
 * alarms with different delays and then only handles events:
 *
 *   g   0 us     (due at once)
 *   b  10 ms
 *   d  20 ms
 *   f  25 ms     its callback sets it again, 10 ms from then
 *   a  30 ms
 *   e   5 ms     set again at once, before it can run, to 40 ms
 *   c  50 ms     cancelled by b's callback
 *   z  80 ms     the last: when it has run, the program looks back
 *
 * It also cancels b after it ran, and an alarm never set: neither may
 * disturb the others. With gm_ticks (half microseconds) read before and
 * after each gm_set_alarm and in each callback, it checks that every
 * callback ran as many times as its alarm was set (c never), not before
 * its deadline and not more than a second after, and in deadline order:
 * no alarm ran after one whose deadline was surely later than its own.
 * It prints a line per alarm and "gm_alarm: ok"; exit status 0 when all
 * is right, 1 if not (with the reason on stderr).
 */

#include <stdio.h>
#include <stdlib.h>

#include "gm.h"
#include "gm_test.h"

#define TICKS_PER_US 2ull
/* How late a callback may run: the process may wait for the processor
   on a busy machine, but an alarm that only runs when something else
   happens would be seconds late. */
#define MAX_LATE_TICKS (1000000ull * TICKS_PER_US)

/* The handle_event of the program's port (gm_test.h): no one sends to
   it, so a message that comes is a failure. */
static void stray(struct gmt *g, struct gm_port *p, gm_recv_event_t *e)
{
  if (gmt_is_message(e)) {
    fprintf(stderr, "gm_alarm: a message came to a port no one sends to\n");
    g->failures++;
  } else {
    gm_unknown(p, e);
  }
}

/* The program and its port (gm_test.h). */
static struct gmt prog = {.name = "gm_alarm", .port_id = 2, .waiting_for = "the start",
                          .handle_event = stray};

/* One alarm of the test: what it was set to, when, and its runs. */
struct test_alarm {
  const char *name;
  gm_alarm_t alarm;
  gm_u64_t usecs;
  /* gm_ticks just before and just after its last gm_set_alarm: its
     deadline lies between these plus the delay. */
  gm_u64_t set_lo, set_hi;
  int runs, want_runs;
  gm_u64_t ran[2];
  /* Deadline bounds of each run, as they were when it ran. */
  gm_u64_t due_lo[2], due_hi[2];
};


enum { G, B, D, F, A, E, C, Z, NALARMS };
static struct test_alarm alarms[NALARMS] = {
    [G] = {.name = "g", .usecs = 0, .want_runs = 1},
    [B] = {.name = "b", .usecs = 10000, .want_runs = 1},
    [D] = {.name = "d", .usecs = 20000, .want_runs = 1},
    [F] = {.name = "f", .usecs = 25000, .want_runs = 2},
    [A] = {.name = "a", .usecs = 30000, .want_runs = 1},
    [E] = {.name = "e", .usecs = 5000, .want_runs = 1},
    [C] = {.name = "c", .usecs = 50000, .want_runs = 0},
    [Z] = {.name = "z", .usecs = 80000, .want_runs = 1},
};
#define F_AGAIN_US 10000ull
#define E_AGAIN_US 40000ull

/* Every run, in the order they happened. */
static struct run {
  int which, nth;
} order[2 * NALARMS];
static int nrun;
static gm_u64_t last_ticks;

/* gm_ticks, checked never to go back. */
static gm_u64_t ticks(void)
{
  gm_u64_t t = gm_ticks(prog.port);
  if (t < last_ticks) {
    fprintf(stderr, "gm_alarm: gm_ticks went back from %llu to %llu\n", last_ticks, t);
    prog.failures++;
  }
  last_ticks = t;
  return t;
}

static void set(struct test_alarm *t, gm_u64_t usecs, void (*callback)(void *))
{
  t->usecs = usecs;
  t->set_lo = ticks();
  gm_set_alarm(prog.port, &t->alarm, usecs, callback, t);
  t->set_hi = ticks();
}

static void ran(void *context)
{
  struct test_alarm *t = context;
  gm_u64_t now = ticks();
  if (t->runs < 2) {
    t->ran[t->runs] = now;
    t->due_lo[t->runs] = t->set_lo + t->usecs * TICKS_PER_US;
    t->due_hi[t->runs] = t->set_hi + t->usecs * TICKS_PER_US;
  }
  if (nrun < (int)(sizeof order / sizeof order[0])) {
    order[nrun].which = (int)(t - alarms);
    order[nrun].nth = t->runs;
    nrun++;
  }
  t->runs++;
}

/* b's callback: it cancels c, which is set and not due (c's deadline
   is 40 ms after b's: it cannot have run before b, and a callback may
   change the alarms, as f's does). */
static void ran_and_cancel(void *context)
{
  ran(context);
  gm_cancel_alarm(&alarms[C].alarm);
}

/* f's callback: the first time, it sets its own alarm again (a GM
   callback may: the alarm is free once its callback runs). */
static void ran_and_again(void *context)
{
  struct test_alarm *t = context;
  ran(context);
  if (t->runs == 1)
    set(t, F_AGAIN_US, ran_and_again);
}

static gm_alarm_t watchdog;

static void watchdog_rang(void *context)
{
  (void)context;
  fprintf(stderr, "gm_alarm: timed out waiting for %s\n", prog.waiting_for);
  exit(1);
}

static long long us(gm_u64_t t)
{
  return (long long)(t / TICKS_PER_US);
}

/* The runs of alarm t: as many as wanted, none early or much late. */
static void check_alarm(struct test_alarm *t, gm_u64_t start)
{
  int k;
  if (t->runs != t->want_runs) {
    fprintf(stderr, "gm_alarm: alarm %s ran %d times, not %d\n", t->name, t->runs, t->want_runs);
    prog.failures++;
    return;
  }
  for (k = 0; k < t->runs && k < 2; k++) {
    printf("  alarm %s run %d: due at +%lld us, ran at +%lld us\n", t->name, k + 1,
           us(t->due_lo[k] - start), us(t->ran[k] - start));
    if (t->ran[k] < t->due_lo[k]) {
      fprintf(stderr, "gm_alarm: alarm %s ran %lld us before its deadline\n", t->name,
              us(t->due_lo[k] - t->ran[k]));
      prog.failures++;
    } else if (t->ran[k] > t->due_hi[k] + MAX_LATE_TICKS) {
      fprintf(stderr, "gm_alarm: alarm %s ran %lld us after its deadline\n", t->name,
              us(t->ran[k] - t->due_hi[k]));
      prog.failures++;
    }
  }
}

int main(int argc, char **argv)
{
  struct gmt_option options[] = {{'p', &prog.port_id}, {0, NULL}};
  struct test_alarm *b = &alarms[B], *e = &alarms[E], *z = &alarms[Z];
  gm_alarm_t never_set;
  gm_u64_t start;
  int i, j, cancelled = 0;

  if (!gmt_options(argc, argv, options)) {
    fprintf(stderr, "usage: %s [-p port]\n", argv[0]);
    return 2;
  }

  if (!gmt_open(&prog))
    return 1;
  gm_initialize_alarm(&watchdog);
  gm_set_alarm(prog.port, &watchdog, 30000000ull, watchdog_rang, NULL);

  for (i = 0; i < NALARMS; i++)
    gm_initialize_alarm(&alarms[i].alarm);
  gm_initialize_alarm(&never_set);

  /* No event is handled while they are set: e's first 5 ms cannot run
     before it is set again, however long setting them takes. */
  start = ticks();
  for (i = 0; i < NALARMS; i++)
    set(&alarms[i], alarms[i].usecs, i == F ? ran_and_again : i == B ? ran_and_cancel : ran);
  set(e, E_AGAIN_US, ran);
  /* Cancelling an alarm that was never set does nothing. */
  gm_cancel_alarm(&never_set);

  prog.waiting_for = "the alarms";
  while (z->runs == 0) {
    gmt_one_event(&prog, prog.port);
    /* b has run: cancelling it now must change nothing. */
    if (b->runs > 0 && !cancelled) {
      cancelled = 1;
      gm_cancel_alarm(&b->alarm);
    }
  }

  for (i = 0; i < NALARMS; i++)
    check_alarm(&alarms[i], start);

  /* Deadline order: a run that came after another had a deadline that
     was not surely earlier than the other's. */
  for (i = 0; i < nrun; i++)
    for (j = i + 1; j < nrun; j++) {
      struct test_alarm *x = &alarms[order[i].which], *y = &alarms[order[j].which];
      int n = order[i].nth, m = order[j].nth;
      if (y->due_hi[m] < x->due_lo[n]) {
        fprintf(stderr, "gm_alarm: alarm %s (due +%lld us) ran after alarm %s (due +%lld us)\n",
                y->name, us(y->due_hi[m] - start), x->name, us(x->due_lo[n] - start));
        prog.failures++;
      }
    }

  printf("gm_alarm: node id %u: ran", prog.me);
  for (i = 0; i < nrun; i++)
    printf(" %s", alarms[order[i].which].name);
  printf("\n");
  if (prog.failures == 0) {
    for (i = 0; i < NALARMS; i++) {
      struct test_alarm *t = &alarms[i];
      if (i == C)
        printf("alarm %s: cancelled, never ran\n", t->name);
      else
        printf("alarm %s: ran %s, not early\n", t->name, t->runs == 2 ? "twice" : "once");
    }
    printf("alarm order: every callback in deadline order\n");
  }

  gm_cancel_alarm(&watchdog);
  gm_close(prog.port);
  gm_finalize();
  if (prog.failures) {
    fprintf(stderr, "gm_alarm: %d failures\n", prog.failures);
    return 1;
  }
  printf("gm_alarm: ok\n");
  return 0;
}
