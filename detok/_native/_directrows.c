/* A received batch's text rows written to their connections as they are dispatched
 * (DeltaReceiver.direct_rows, installed by the HTTP frontend; part of detok._native._chunkpush).
 *
 * push_rows(streams, stream_type, rids, texts, offsets, counts, finished, entries, kinds) -> list[int] | None
 *
 * Per row k (rids, texts, offsets: lists of one length; counts: a list of that length, or None;
 * finished: a set of the rids this batch finishes or gives typed rows (what is applied after the
 * rows), or None; entries: the batch's entry-rows (rid, TokenLogprobs, first, items or None),
 * split_logprobs's list, or None) whose stream (streams[rids[k]]) is exactly of `stream_type`
 * (RequestStream: a StreamFields, whose fields are read from its own struct, _streamfields.h) and
 * is in the state where the Python path would only
 * append the text, queue the stream, and at the end of the loop's turn have its TextPusher take that
 * text alone and write it -
 *   the row not finished by this batch (nor given typed rows), its text at the offset the stream
 *   expects (an empty text: only with the entries of a held token, in chat items mode; an empty row
 *   without entries needs nothing but its token count, kept here);
 *   nothing else waiting in the stream (no text, no logprob entries, no finish, no typed output, not
 *   queued for a push: stream_fields.idle_for_push, whose twin is detok_fields_idle); its consumer waiting (a waiter not done); its pusher a TextPusher whose
 *   client is there and reads; a text-only pusher's request without entries in the batch, a chat
 *   items-mode pusher's with one run of rendered items from the token the stream expects -
 * it does the same at once: the token count kept (as the Python loop does), the char offset
 * advanced (and the token index past the run), the chunk (the clock ticked) written; the run's pair
 * in `entries` is set to None (applied). The chunk holds the row's text alone, as the Python
 * path's does for such a stream (the workers send one row per request a step; two rows of a request
 * in one loop turn, which the Python path joins, go out as two chunks of the same text). A write that
 * raises is handed to the consumer as the Python `_push` hands it (the pusher dropped, the error
 * kept for the consumer to raise, its waiter woken).
 *
 * kinds (DeltaBatch.kinds: a uint8 per row, or None): a parsed request's row of reasoning (1) or
 * content (2), without entries, whose stream has a TypedState with nothing waiting and expects that
 * offset of that kind, and a typed TextPusher (pusher_for of a parsed chat choice without logprobs
 * or per-chunk usage) is written at once as TypedChoice.chunks renders a delta of it alone: the
 * content's text chunk, the reasoning's field chunk (nothing when the request does not show its
 * reasoning, and then no clock tick either); the state's count of that kind advanced. Tool-call
 * argument rows (3) too, for a pusher given the choice's sent_args: the fragment chunk of the last
 * call opened, as TypedChoice._fragments writes it.
 *
 * Every other row is left untouched to the caller, and so is every later row of a request one of
 * whose rows was left (its rows stay in order): returned are their indices in order (None: no row
 * left). A rid with no open stream needs nothing and is not returned. Why: the Python path is
 * six calls per row (feed, wake, queue, push, take, the pusher), a large share of the frontend under
 * load; this is one pass of struct reads. */
#include "_textpusher.h"

/* the consumer's asyncio future's methods (asyncio's API, not detok's) */
static PyObject *S_done, *S_set_result;

int detok_directrows_init(void) {
    return (S_done = PyUnicode_InternFromString("done")) && (S_set_result = PyUnicode_InternFromString("set_result"))
        ? 0 : -1;
}

int detok_fields_idle(StreamFields *f, int typed) {
    /* as stream_fields.idle_for_push: nothing waiting in the stream (no text, no entries, no finish,
     * no typed output unless `typed`) and no push queued */
    return !f->push_queued && f->finish == Py_None && (typed || f->typed == Py_None) && detok_empty_list(f->chunks)
        && detok_empty_list(f->logprobs);
}

PyObject *detok_direct_stream(PyObject *stream, PyObject *offset, PyObject **waiter, TextPusher **pusher, int typed) {
    StreamFields *f = (StreamFields *)stream;
    int r;
    if (!detok_fields_idle(f, typed)) return Py_None;
    if (offset != NULL && !typed) { /* (NULL: an empty row, whose offset says nothing; typed: the caller's) */
        PyObject *received = f->received;
        r = received != NULL && PyLong_CheckExact(received) ? PyObject_RichCompareBool(received, offset, Py_EQ) : 0;
        if (r <= 0) return r < 0 ? NULL : Py_None;
    }
    PyObject *p = f->pusher, *w = f->waiter;
    if (p == NULL || w == NULL || Py_TYPE(p) != &detok_TextPusherType || (typed && !((TextPusher *)p)->typed))
        return Py_None;
    Py_INCREF(p);
    Py_INCREF(w);
    /* its consumer waits (the future's own done(): asyncio's API) */
    PyObject *done = w == Py_None ? Py_NewRef(Py_True) : PyObject_CallMethodNoArgs(w, S_done);
    r = done == NULL ? -1 : done == Py_False ? 1 : 0;
    Py_XDECREF(done);
    if (r == 1) r = detok_pusher_ready((TextPusher *)p);
    if (r <= 0) {
        Py_DECREF(p);
        Py_DECREF(w);
        return r < 0 ? NULL : Py_None;
    }
    *waiter = w;
    *pusher = (TextPusher *)p;
    return Py_NewRef(stream);
}

/* the stream's token count kept as the Python loop keeps it: raised to n if higher (or unset) */
int detok_keep_count(PyObject *stream, PyObject *n) {
    StreamFields *f = (StreamFields *)stream;
    PyObject *have = f->tokens;
    int higher = have == NULL || have == Py_None ? 1 : PyObject_RichCompareBool(n, have, Py_GT);
    if (higher < 0) return -1;
    if (higher) Py_XSETREF(f->tokens, Py_NewRef(n));
    return 0;
}

/* a write that raised an Exception: the consumer's to raise, as RequestStream._push hands it over */
int detok_hand_over(PyObject *stream, PyObject *waiter) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1; /* (not caught by the Python path either) */
    PyObject *type, *exc, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    if (tb != NULL) PyException_SetTraceback(exc, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    StreamFields *f = (StreamFields *)stream;
    Py_XSETREF(f->pusher, Py_NewRef(Py_None));
    Py_XSETREF(f->push_error, exc);
    PyObject *ok = PyObject_CallMethodOneArg(waiter, S_set_result, Py_None);
    if (ok == NULL) return -1;
    Py_DECREF(ok);
    return 0;
}

/* the items of `row` (an entry-row of split_logprobs: (rid, entries, first, items); a new
 * reference to its non-empty list of rendered items, one per entry) if it starts at the token the
 * stream expects, with *end its end; Py_None (a new reference) if not; NULL on an error */
static PyObject *run_items(PyObject *stream, PyObject *row, PyObject **end) {
    PyObject *first = PyTuple_GET_ITEM(row, 2), *items = PyTuple_GET_ITEM(row, 3);
    PyObject *next = ((StreamFields *)stream)->next_token;
    if (next == NULL || !PyList_CheckExact(items) || PyList_GET_SIZE(items) == 0 || !PyLong_CheckExact(first))
        return Py_NewRef(Py_None); /* (not rendered, or not set: the Python path's) */
    int r = PyObject_RichCompareBool(first, next, Py_EQ);
    if (r == 1) {
        PyObject *len = PyLong_FromSsize_t(PyList_GET_SIZE(items));
        *end = len == NULL ? NULL : PyNumber_Add(first, len);
        Py_XDECREF(len);
        if (*end == NULL) r = -1;
    }
    if (r == 1) return Py_NewRef(items);
    return r < 0 ? NULL : Py_NewRef(Py_None);
}

/* row k written at once: 1; left to the caller: 0; an error: -1. `run`: the row's request's one
 * logprob run of this batch (NULL: none) - a chat items-mode pusher writes the text with its
 * items, and nothing without them */
static int push_row(PyObject *stream, PyObject *text, PyObject *offset, PyObject *count, PyObject *run) {
    PyObject *waiter = NULL;
    TextPusher *pusher = NULL;
    Py_ssize_t chars = PyUnicode_GET_LENGTH(text);
    PyObject *s = detok_direct_stream(stream, chars > 0 ? offset : NULL, &waiter, &pusher, 0);
    if (s == NULL) return -1;
    if (s == Py_None) return 0;
    PyObject *items = NULL, *run_end = NULL;
    if (pusher->mid != NULL || run != NULL) { /* (a text-only pusher with entries: the Python path's) */
        items = pusher->mid != NULL && run != NULL ? run_items(stream, run, &run_end) : Py_NewRef(Py_None);
        if (items == NULL || items == Py_None) {
            if (items == Py_None) Py_DECREF(items);
            Py_DECREF(s);
            Py_DECREF(waiter);
            Py_DECREF(pusher);
            return items == NULL ? -1 : 0;
        }
    }
    int r = count != NULL ? detok_keep_count(stream, count) : 0;
    if (r == 0 && run_end != NULL) Py_XSETREF(((StreamFields *)stream)->next_token, Py_NewRef(run_end));
    PyObject *end = NULL;
    if (r == 0 && chars > 0) {
        PyObject *len = PyLong_FromSsize_t(chars);
        end = len == NULL ? NULL : PyNumber_Add(offset, len);
        Py_XDECREF(len);
        if (end == NULL) r = -1;
        else Py_XSETREF(((StreamFields *)stream)->received, end);
    }
    if (r == 0 && detok_push_chunk(pusher, text, items) < 0) r = detok_hand_over(stream, waiter);
    Py_XDECREF(items);
    Py_XDECREF(run_end);
    Py_DECREF(s);
    Py_DECREF(waiter);
    Py_DECREF(pusher);
    return r < 0 ? -1 : 1;
}

/* rid -> the index in `entries` of its one run (Py_None: several), or NULL on an error */
static PyObject *runs_by_rid(PyObject *entries) {
    PyObject *runs = PyDict_New();
    if (runs == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries); i++) {
        PyObject *pair = PyList_GET_ITEM(entries, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 4) {
            PyErr_SetString(PyExc_TypeError, "push_rows: entries must be (rid, run, first, items) rows");
            goto error;
        }
        PyObject *rid = PyTuple_GET_ITEM(pair, 0);
        int seen = PyDict_Contains(runs, rid);
        PyObject *index = seen ? Py_NewRef(Py_None) : PyLong_FromSsize_t(i);
        if (seen < 0 || index == NULL || PyDict_SetItem(runs, rid, index) < 0) {
            Py_XDECREF(index);
            goto error;
        }
        Py_DECREF(index);
    }
    return runs;
error:
    Py_DECREF(runs);
    return NULL;
}

/* one batch's columns, as push_rows was given them (borrowed; NULL where None), and its pass's state */
typedef struct {
    PyObject *texts, *offsets, *counts, *finished, *entries, *runs, *left_rids;
    const unsigned char *kinds;
} Batch;

/* row k of the batch, of an open `stream` of the stream type: 1 done here (written, or nothing to
 * do but its token count), 0 left to the caller, -1 an error */
static int push_one(Batch *b, Py_ssize_t k, PyObject *stream, PyObject *rid, PyObject *text) {
    /* a request the batch finishes or gives typed rows after the rows, or one that already had a
     * row left to the caller: the caller's, so that its rows stay in order and go out with the rest */
    int r = b->finished != NULL ? PySet_Contains(b->finished, rid) : 0;
    if (r == 0 && b->left_rids != NULL) r = PySet_Contains(b->left_rids, rid);
    if (r != 0) return r < 0 ? -1 : 0;
    PyObject *index = NULL, *run = NULL; /* (borrowed) */
    if (b->runs != NULL && (index = PyDict_GetItemWithError(b->runs, rid)) == NULL && PyErr_Occurred()) return -1;
    if (index != NULL) { /* (None: several runs, or its one run written with an earlier row: the caller's) */
        PyObject *pair = index == Py_None ? Py_None : PyList_GET_ITEM(b->entries, PyLong_AsSsize_t(index));
        if (!PyTuple_CheckExact(pair)) return 0;
        run = pair;
    }
    PyObject *count = b->counts != NULL ? PyList_GET_ITEM(b->counts, k) : NULL;
    PyObject *offset = PyList_GET_ITEM(b->offsets, k);
    int kind = b->kinds != NULL ? b->kinds[k] : 0;
    if (run == NULL && PyUnicode_GET_LENGTH(text) == 0) /* an empty row says nothing but its token count */
        return count != NULL && detok_keep_count(stream, count) < 0 ? -1 : 1;
    if (kind != 0) /* a parsed request's row (without entries: its pusher is text-only) */
        return run == NULL && kind <= 3 ? detok_push_typed_row(stream, kind, text, offset, count) : 0;
    r = push_row(stream, text, offset, count, run);
    if (r == 1 && run != NULL) { /* its run is written: not applied again */
        Py_INCREF(Py_None);
        if (PyList_SetItem(b->entries, PyLong_AsSsize_t(index), Py_None) < 0) return -1;
    }
    return r;
}

PyObject *detok_push_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "push_rows(streams, stream_type, rids, texts, offsets, counts, finished, entries, kinds)");
        return NULL;
    }
    PyObject *streams = args[0], *type = args[1], *rids = args[2];
    Batch b = {args[3], args[4], args[5] == Py_None ? NULL : args[5], args[6] == Py_None ? NULL : args[6],
               args[7] == Py_None ? NULL : args[7], NULL, NULL, NULL};
    if (args[8] != Py_None && !PyBytes_CheckExact(args[8])) {
        PyErr_SetString(PyExc_TypeError, "push_rows: kinds must be bytes or None");
        return NULL;
    }
    if (!PyDict_CheckExact(streams) || !PyType_Check(type) || !PyList_CheckExact(rids) || !PyList_CheckExact(b.texts)
        || !PyList_CheckExact(b.offsets) || (b.counts != NULL && !PyList_CheckExact(b.counts))
        || (b.finished != NULL && !PyAnySet_CheckExact(b.finished)) || (b.entries != NULL && !PyList_CheckExact(b.entries))) {
        PyErr_SetString(PyExc_TypeError, "push_rows: a dict, a type, three lists, a list or None, a set or None, a list or None");
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)type, &detok_StreamFieldsType)) {
        PyErr_SetString(PyExc_TypeError, "push_rows: the stream type must derive from StreamFields");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(rids);
    if (PyList_GET_SIZE(b.texts) != n || PyList_GET_SIZE(b.offsets) != n || (b.counts != NULL && PyList_GET_SIZE(b.counts) != n)
        || (args[8] != Py_None && PyBytes_GET_SIZE(args[8]) != n)) {
        PyErr_SetString(PyExc_ValueError, "push_rows: the columns differ in length");
        return NULL;
    }
    if (args[8] != Py_None) b.kinds = (const unsigned char *)PyBytes_AS_STRING(args[8]);
    b.runs = b.entries != NULL && PyList_GET_SIZE(b.entries) > 0 ? runs_by_rid(b.entries) : NULL;
    if (b.runs == NULL && PyErr_Occurred()) return NULL;
    PyObject *left = NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *rid = PyList_GET_ITEM(rids, k), *text = PyList_GET_ITEM(b.texts, k);
        PyObject *stream = PyDict_GetItemWithError(streams, rid); /* borrowed */
        if (stream == NULL) {
            if (PyErr_Occurred()) goto error;
            continue; /* no open stream: nothing to do */
        }
        int r = 0;
        if (Py_TYPE(stream) == (PyTypeObject *)type && PyUnicode_CheckExact(text)) {
            Py_INCREF(stream); /* (a write may run code that closes it) */
            r = push_one(&b, k, stream, rid, text);
            Py_DECREF(stream);
            if (r < 0) goto error;
        }
        if (r == 0) {
            PyObject *at = PyLong_FromSsize_t(k);
            if (at == NULL || (left == NULL && (left = PyList_New(0)) == NULL) || PyList_Append(left, at) < 0
                || (b.left_rids == NULL && (b.left_rids = PySet_New(NULL)) == NULL) || PySet_Add(b.left_rids, rid) < 0) {
                Py_XDECREF(at);
                goto error;
            }
            Py_DECREF(at);
        }
    }
    Py_XDECREF(b.runs);
    Py_XDECREF(b.left_rids);
    return left != NULL ? left : Py_NewRef(Py_None);
error:
    Py_XDECREF(b.runs);
    Py_XDECREF(b.left_rids);
    Py_XDECREF(left);
    return NULL;
}
