/*
 * ruby/board.c - Margay::Native::IdleBoard: how many threads each cluster worker
 * has waiting for work, in one page of counters shared by every process
 * forked after the board was made (MAP_SHARED | MAP_ANONYMOUS). The master
 * makes it before forking; each worker's engine counts its waiting threads
 * into its own slot as they enter and leave the event loop, so a saturated
 * worker can tell, without asking anyone, whether handing a client to
 * another worker would help: if some other worker has a thread free, or
 * serves far fewer connections (each engine also counts its connections,
 * in a second row of counters after the first).
 */
#include "ruby/board.h"
#include "core/board.h"
#include "core/health.h"
#include <sys/mman.h>

typedef struct {
  _Atomic int *slots;
  int n;
  mg_text *metrics; /* the cluster's metrics text (core/health.h), shared like the counters */
} mg_board;

static void board_free(void *p) {
  mg_board *b = p;
  /* not unmapped: an engine of this process may still count into it */
  xfree(b);
}

static size_t board_memsize(const void *p) {
  (void)p;
  return sizeof(mg_board);
}

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

/* IdleBoard.new(slots): one counter per row (waiting threads, connections)
 * and worker index, all 0. */
static VALUE board_initialize(VALUE self, VALUE nv) {
  mg_board *b = board_get(self);
  int n = NUM2INT(nv);
  if (n <= 0 || n > 4096) rb_raise(rb_eArgError, "slots must be 1..4096");
  void *mem = mmap(NULL, mg_board_cells(n) * sizeof(_Atomic int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) rb_sys_fail("Margay::Native::IdleBoard#initialize: mmap");
  b->metrics = mg_text_map();
  if (!b->metrics) rb_sys_fail("Margay::Native::IdleBoard#initialize: mmap");
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

/* #unread(index): clients that worker took in and no thread reached yet. */
static VALUE board_unread(VALUE self, VALUE iv) { return board_read(self, iv, MG_BOARD_UNREAD); }

/* #busy(index): that worker's app threads in a request (as of its supervisor's last tick). */
static VALUE board_busy(VALUE self, VALUE iv) { return board_read(self, iv, MG_BOARD_BUSY); }

/* #backlog(index): that worker's requests waiting for a thread, as of its last look
 * (Engine#queue_look, every 100 ms). */
static VALUE board_backlog(VALUE self, VALUE iv) { return board_read(self, iv, MG_BOARD_BACKLOG); }

/* #oldest_wait_ms(index): how long the longest-waiting of them had waited, as of that look. */
static VALUE board_oldest_wait_ms(VALUE self, VALUE iv) { return board_read(self, iv, MG_BOARD_OLDEST_MS); }

/* #clear(index): the worker is gone (it may not have counted itself out). */
static VALUE board_clear(VALUE self, VALUE iv) {
  mg_board *b = board_get(self);
  int i = slot_index(b, iv);
  for (int row = 0; row < MG_BOARD_ROWS; row++) atomic_store(mg_board_cell(b->slots, b->n, row, i), 0);
  return Qnil;
}

/* #ready?(index): that worker's engine serves, neither draining nor stopping. */
static VALUE board_ready_p(VALUE self, VALUE iv) { return NUM2INT(board_read(self, iv, MG_BOARD_READY)) > 0 ? Qtrue : Qfalse; }

/* #drain!: the whole cluster drains: no worker is ready, every response closes its connection
 * (each worker's engine reads the flag). Trap-safe. */
static VALUE board_drain(VALUE self) {
  mg_board *b = board_get(self);
  atomic_store(mg_board_drain_flag(b->slots, b->n), 1);
  return Qnil;
}

/* #draining?: #drain! was called. */
static VALUE board_draining_p(VALUE self) {
  mg_board *b = board_get(self);
  return atomic_load(mg_board_drain_flag(b->slots, b->n)) ? Qtrue : Qfalse;
}

/* #metrics_text=(text): what GET /metrics on the cluster's health listener answers from now on
 * (any worker answers it; at most 4 MiB). */
static VALUE board_set_metrics_text(VALUE self, VALUE text) {
  mg_board *b = board_get(self);
  StringValue(text);
  if (mg_text_set(b->metrics, RSTRING_PTR(text), (size_t)RSTRING_LEN(text)) != 0)
    rb_raise(rb_eArgError, "metrics text: at most %u bytes", MG_TEXT_CAP);
  return text;
}

/* The board's metrics text. */
mg_text *mg_board_metrics(VALUE board) { return board_get(board)->metrics; }

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
  rb_define_method(c, "unread", board_unread, 1);
  rb_define_method(c, "busy", board_busy, 1);
  rb_define_method(c, "backlog", board_backlog, 1);
  rb_define_method(c, "oldest_wait_ms", board_oldest_wait_ms, 1);
  rb_define_method(c, "clear", board_clear, 1);
  rb_define_method(c, "ready?", board_ready_p, 1);
  rb_define_method(c, "drain!", board_drain, 0);
  rb_define_method(c, "draining?", board_draining_p, 0);
  rb_define_method(c, "metrics_text=", board_set_metrics_text, 1);
}
