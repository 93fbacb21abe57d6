/* A received batch's text rows written to their connections as they are dispatched
 * (DeltaReceiver.direct_rows, installed by the HTTP frontend; part of detok.frontend._chunkpush).
 *
 * push_rows(streams, stream_type, rids, texts, offsets, counts, finished) -> list[int] | None
 *
 * Per row k (rids, texts, offsets: lists of one length; counts: a list of that length, or None;
 * finished: a set of the rids this batch finishes, or None) whose stream (streams[rids[k]]) is
 * exactly of `stream_type` (RequestStream) and is in the state where the Python path would only
 * append the text, queue the stream, and at the end of the loop's turn have its TextPusher take that
 * text alone and write it -
 *   the row not finished by this batch, its text not empty and at the offset the stream expects;
 *   nothing else waiting in the stream (no text, no logprob entries, no finish, no typed output, not
 *   queued for a push); its consumer waiting (a waiter not done); its pusher a text-only TextPusher
 *   whose client is there and reads -
 * it does the same at once: the token count kept (as the Python loop does), the char offset
 * advanced, the chunk (the clock ticked) written. The chunk holds the row's text alone, as the Python
 * path's does for such a stream (the workers send one row per request a step; two rows of a request
 * in one loop turn, which the Python path joins, go out as two chunks of the same text). A write that
 * raises is handed to the consumer as the Python `_push` hands it (the pusher dropped, the error
 * kept for the consumer to raise, its waiter woken).
 *
 * Every other row is left untouched to the caller, and so is every later row of a request one of
 * whose rows was left (its rows stay in order): returned are their indices in order (None: no row
 * left). A rid with no open stream needs nothing and is not returned. Why: the Python path is
 * six calls per row (feed, wake, queue, push, take, the pusher) ≈ 2 µs of the frontend under load;
 * this is one pass of slot reads. */
#include "_textpusher.h"

static PyObject *S_pusher, *S_push_queued, *S_chunks, *S_logprobs, *S_finish, *S_typed, *S_received, *S_waiter,
    *S_tokens, *S_push_error, *S_done, *S_set_result;

int detok_directrows_init(void) {
    return (S_pusher = PyUnicode_InternFromString("_pusher")) && (S_push_queued = PyUnicode_InternFromString("_push_queued"))
        && (S_chunks = PyUnicode_InternFromString("_chunks")) && (S_logprobs = PyUnicode_InternFromString("_logprobs"))
        && (S_finish = PyUnicode_InternFromString("finish")) && (S_typed = PyUnicode_InternFromString("_typed"))
        && (S_received = PyUnicode_InternFromString("_received")) && (S_waiter = PyUnicode_InternFromString("_waiter"))
        && (S_tokens = PyUnicode_InternFromString("_tokens")) && (S_push_error = PyUnicode_InternFromString("_push_error"))
        && (S_done = PyUnicode_InternFromString("done")) && (S_set_result = PyUnicode_InternFromString("set_result"))
        ? 0 : -1;
}

/* 1 if stream.name is `expected` (an identity test: None, False), 0 if not, -1 on an error */
static int attr_is(PyObject *stream, PyObject *name, PyObject *expected) {
    PyObject *v = PyObject_GetAttr(stream, name);
    if (v == NULL) return -1;
    int r = v == expected;
    Py_DECREF(v);
    return r;
}

/* 1 if stream.name is an empty list, 0 if not (or not a list), -1 on an error */
static int attr_empty_list(PyObject *stream, PyObject *name) {
    PyObject *v = PyObject_GetAttr(stream, name);
    if (v == NULL) return -1;
    int r = PyList_CheckExact(v) && PyList_GET_SIZE(v) == 0;
    Py_DECREF(v);
    return r;
}

/* the row's stream if it can be written at once (a new reference), Py_None (borrowed) if not, NULL
 * on an error; *waiter: the stream's waiter (a new reference) when the stream is given */
static PyObject *direct_stream(PyObject *stream, PyObject *offset, PyObject **waiter, TextPusher **pusher) {
    int r;
    if ((r = attr_is(stream, S_push_queued, Py_False)) <= 0 || (r = attr_is(stream, S_finish, Py_None)) <= 0
        || (r = attr_is(stream, S_typed, Py_None)) <= 0 || (r = attr_empty_list(stream, S_chunks)) <= 0
        || (r = attr_empty_list(stream, S_logprobs)) <= 0)
        return r < 0 ? NULL : Py_None;
    PyObject *received = PyObject_GetAttr(stream, S_received);
    if (received == NULL) return NULL;
    r = PyLong_CheckExact(received) ? PyObject_RichCompareBool(received, offset, Py_EQ) : 0;
    Py_DECREF(received);
    if (r <= 0) return r < 0 ? NULL : Py_None;
    PyObject *p = PyObject_GetAttr(stream, S_pusher);
    if (p == NULL) return NULL;
    if (Py_TYPE(p) != &detok_TextPusherType || ((TextPusher *)p)->mid != NULL) {
        Py_DECREF(p);
        return Py_None;
    }
    PyObject *w = PyObject_GetAttr(stream, S_waiter);
    if (w == NULL) {
        Py_DECREF(p);
        return NULL;
    }
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
static int keep_count(PyObject *stream, PyObject *n) {
    PyObject *have = PyObject_GetAttr(stream, S_tokens);
    if (have == NULL) return -1;
    int higher = have == Py_None ? 1 : PyObject_RichCompareBool(n, have, Py_GT);
    Py_DECREF(have);
    if (higher < 0) return -1;
    return higher ? PyObject_SetAttr(stream, S_tokens, n) : 0;
}

/* a write that raised an Exception: the consumer's to raise, as RequestStream._push hands it over */
static int hand_over(PyObject *stream, PyObject *waiter) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1; /* (not caught by the Python path either) */
    PyObject *type, *exc, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    if (tb != NULL) PyException_SetTraceback(exc, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    int r = PyObject_SetAttr(stream, S_pusher, Py_None);
    if (r == 0) r = PyObject_SetAttr(stream, S_push_error, exc);
    Py_DECREF(exc);
    if (r < 0) return -1;
    PyObject *ok = PyObject_CallMethodOneArg(waiter, S_set_result, Py_None);
    if (ok == NULL) return -1;
    Py_DECREF(ok);
    return 0;
}

/* row k written at once: 1; left to the caller: 0; an error: -1 */
static int push_row(PyObject *stream, PyObject *text, PyObject *offset, PyObject *count) {
    PyObject *waiter = NULL;
    TextPusher *pusher = NULL;
    PyObject *s = direct_stream(stream, offset, &waiter, &pusher);
    if (s == NULL) return -1;
    if (s == Py_None) return 0;
    int r = count != NULL ? keep_count(stream, count) : 0;
    PyObject *end = NULL;
    if (r == 0) {
        PyObject *len = PyLong_FromSsize_t(PyUnicode_GET_LENGTH(text));
        end = len == NULL ? NULL : PyNumber_Add(offset, len);
        Py_XDECREF(len);
        r = end == NULL ? -1 : PyObject_SetAttr(stream, S_received, end);
        Py_XDECREF(end);
    }
    if (r == 0 && detok_push_text(pusher, text) < 0) r = hand_over(stream, waiter);
    Py_DECREF(s);
    Py_DECREF(waiter);
    Py_DECREF(pusher);
    return r < 0 ? -1 : 1;
}

PyObject *detok_push_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "push_rows(streams, stream_type, rids, texts, offsets, counts, finished)");
        return NULL;
    }
    PyObject *streams = args[0], *type = args[1], *rids = args[2], *texts = args[3], *offsets = args[4];
    PyObject *counts = args[5] == Py_None ? NULL : args[5], *finished = args[6] == Py_None ? NULL : args[6];
    if (!PyDict_CheckExact(streams) || !PyType_Check(type) || !PyList_CheckExact(rids) || !PyList_CheckExact(texts)
        || !PyList_CheckExact(offsets) || (counts != NULL && !PyList_CheckExact(counts))
        || (finished != NULL && !PyAnySet_CheckExact(finished))) {
        PyErr_SetString(PyExc_TypeError, "push_rows: a dict, a type, three lists, a list or None, a set or None");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(rids);
    if (PyList_GET_SIZE(texts) != n || PyList_GET_SIZE(offsets) != n || (counts != NULL && PyList_GET_SIZE(counts) != n)) {
        PyErr_SetString(PyExc_ValueError, "push_rows: the columns differ in length");
        return NULL;
    }
    PyObject *left = NULL, *left_rids = NULL; /* (rows after one left to the caller are its too: in order) */
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *rid = PyList_GET_ITEM(rids, k), *text = PyList_GET_ITEM(texts, k);
        PyObject *stream = PyDict_GetItemWithError(streams, rid); /* borrowed */
        int r = 0;
        if (stream == NULL) {
            if (PyErr_Occurred()) goto error;
            continue; /* no open stream: nothing to do */
        }
        if (Py_TYPE(stream) == (PyTypeObject *)type && PyUnicode_CheckExact(text) && PyUnicode_GET_LENGTH(text) > 0) {
            r = finished != NULL ? PySet_Contains(finished, rid) : 0;
            if (r == 0 && left_rids != NULL) r = PySet_Contains(left_rids, rid);
            if (r == 0) {
                Py_INCREF(stream); /* (a write may run code that closes it) */
                r = push_row(stream, text, PyList_GET_ITEM(offsets, k), counts != NULL ? PyList_GET_ITEM(counts, k) : NULL);
                Py_DECREF(stream);
            } else if (r == 1) {
                r = 0;
            }
            if (r < 0) goto error;
        }
        if (r == 0) {
            PyObject *index = PyLong_FromSsize_t(k);
            if (index == NULL || (left == NULL && (left = PyList_New(0)) == NULL) || PyList_Append(left, index) < 0
                || (left_rids == NULL && (left_rids = PySet_New(NULL)) == NULL) || PySet_Add(left_rids, rid) < 0) {
                Py_XDECREF(index);
                goto error;
            }
            Py_DECREF(index);
        }
    }
    Py_XDECREF(left_rids);
    return left != NULL ? left : Py_NewRef(Py_None);
error:
    Py_XDECREF(left);
    Py_XDECREF(left_rids);
    return NULL;
}
