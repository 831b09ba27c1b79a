/*
 * board.c - Margay::Native::IdleBoard: how many threads each cluster worker
 * has waiting for work, in one page of counters shared by every process
 * forked after the board was made (MAP_SHARED | MAP_ANONYMOUS). The master
 * makes it before forking; each worker's engine counts its waiting threads
 * into its own slot as they enter and leave the event loop, so a saturated
 * worker can tell, without asking anyone, whether handing a client to
 * another worker would help: if some other worker has a thread free, or
 * serves far fewer connections (each engine also counts its connections,
 * in a second row of counters after the first).
 */
#include "engine.h"
#include <sys/mman.h>

typedef struct {
  _Atomic int *slots;
  int n;
} mg_board;

static void board_free(void *p) {
  mg_board *b = p;
  /* not unmapped: an engine of this process may still count into it */
  xfree(b);
}

static size_t board_memsize(const void *p) { return sizeof(mg_board); }

static const rb_data_type_t board_type = {
  "Margay::Native::IdleBoard",
  {NULL, board_free, board_memsize},
  0, 0, RUBY_TYPED_FREE_IMMEDIATELY
};

static mg_board *board_get(VALUE self) { return rb_check_typeddata(self, &board_type); }

static VALUE board_alloc(VALUE klass) {
  mg_board *b;
  VALUE obj = TypedData_Make_Struct(klass, mg_board, &board_type, b);
  b->slots = NULL;
  b->n = 0;
  return obj;
}

/* IdleBoard.new(slots): two counters per worker index (waiting threads,
 * connections), all 0. */
static VALUE board_initialize(VALUE self, VALUE nv) {
  mg_board *b = board_get(self);
  int n = NUM2INT(nv);
  if (n <= 0 || n > 4096) rb_raise(rb_eArgError, "slots must be 1..4096");
  void *mem = mmap(NULL, 2 * (size_t)n * sizeof(_Atomic int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) rb_sys_fail("Margay::Native::IdleBoard#initialize: mmap");
  b->slots = mem;
  b->n = n;
  return self;
}

static int slot_index(mg_board *b, VALUE iv) {
  int i = NUM2INT(iv);
  if (!b->slots || i < 0 || i >= b->n) rb_raise(rb_eIndexError, "no slot %d", i);
  return i;
}

/* #size: the number of slots. */
static VALUE board_size(VALUE self) { return INT2NUM(board_get(self)->n); }

static VALUE board_read(VALUE self, VALUE iv, int row) {
  mg_board *b = board_get(self);
  return INT2NUM(atomic_load(mg_board_cell(b->slots, b->n, row, slot_index(b, iv))));
}

/* #[](index): threads waiting in that worker. */
static VALUE board_aref(VALUE self, VALUE iv) { return board_read(self, iv, MG_BOARD_WAITING); }

/* #connections(index): connections that worker's engine holds. */
static VALUE board_connections(VALUE self, VALUE iv) { return board_read(self, iv, MG_BOARD_CONNS); }

/* #clear(index): the worker is gone (it may not have counted itself out). */
static VALUE board_clear(VALUE self, VALUE iv) {
  mg_board *b = board_get(self);
  int i = slot_index(b, iv);
  atomic_store(mg_board_cell(b->slots, b->n, MG_BOARD_WAITING, i), 0);
  atomic_store(mg_board_cell(b->slots, b->n, MG_BOARD_CONNS, i), 0);
  return Qnil;
}

/* How many waiting threads the other workers than the engine's count (0
 * without a board). Plain C: the event loop asks without the GVL (the engine
 * keeps the board alive). */
int mg_board_others_waiting(const mg_engine *e) {
  int sum = 0;
  for (int i = 0; e->board_slots && i < e->board_n; i++) {
    int w = i == e->board_index ? 0 : atomic_load(mg_board_cell(e->board_slots, e->board_n, MG_BOARD_WAITING, i));
    if (w > 0) sum += w;
  }
  return sum;
}

/* How many idle connections the worker at +index+ should hand over: half
 * the gap to the least loaded other worker that is serving (it has a thread
 * waiting or a connection; a mold or a gone worker has neither), when the
 * gap is at least a quarter of this worker's connections and at least 4.
 * The other worker then holds about as many, so it has no reason to hand
 * them back. */
int mg_board_handoff_quota(const mg_engine *e) {
  if (!e->board_slots) return 0;
  int n = e->board_n;
  _Atomic int *waiting = mg_board_cell(e->board_slots, n, MG_BOARD_WAITING, 0);
  _Atomic int *conns_of = mg_board_cell(e->board_slots, n, MG_BOARD_CONNS, 0);
  int mine = atomic_load(&conns_of[e->board_index]), fewest = -1;
  for (int i = 0; i < n; i++) {
    if (i == e->board_index) continue;
    int conns = atomic_load(&conns_of[i]);
    if (conns < 0) conns = 0;
    if (conns == 0 && atomic_load(&waiting[i]) <= 0) continue; /* not serving */
    if (fewest < 0 || conns < fewest) fewest = conns;
  }
  if (fewest < 0) return 0;
  int gap = mine - fewest;
  return gap >= 4 && gap >= mine / 4 ? gap / 2 : 0;
}

/* The board's counters and their number (*n), or NULL when it has none. */
_Atomic int *mg_board_slots(VALUE board, int *n) {
  mg_board *b = board_get(board);
  *n = b->n;
  return b->slots;
}

void mg_board_init(VALUE mNative) {
  VALUE c = rb_define_class_under(mNative, "IdleBoard", rb_cObject);
  rb_define_alloc_func(c, board_alloc);
  rb_define_method(c, "initialize", board_initialize, 1);
  rb_define_method(c, "size", board_size, 0);
  rb_define_method(c, "[]", board_aref, 1);
  rb_define_method(c, "connections", board_connections, 1);
  rb_define_method(c, "clear", board_clear, 1);
}
