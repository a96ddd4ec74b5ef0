/*
 * source_file.c: the file source (SPEC 2.2): the files of one directory,
 * each read once, whole, in one batch.
 *
 * Which files, and when.  A plan lists the directory (not its
 * subdirectories): regular files whose names match the pattern (fnmatch,
 * case-sensitive) and do not start with "." or "_".  A file is settled,
 * and may be read, once its modification time is streaming.file_settle_time
 * in the past: every write moves the mtime, so such a file has not changed
 * in size or content for that long.  A file of a name the stream has read
 * (or decided never to read) is never read again, whatever it holds now, as
 * Spark's file source skips it.  Files are taken oldest mtime first (then
 * by name, byte order), newest first with latest_first, at most
 * max_files_per_trigger per batch.  max_file_age: a file older than that
 * when the stream first sees it is recorded as never to be read.
 *
 * Positions.  streaming.files lists, per stream, every file read (with the
 * batch that read it) or never to be read (batch_id NULL), written in the
 * batch's transaction (save_positions); the files seen but not yet read are
 * kept in streaming.positions (positions.c: the part is the file's name,
 * at byte 0 of its size), so that source_lag shows one row per pending file
 * with its size as lag, and a file once seen is read even when it gets
 * older than max_file_age meanwhile.  Those rows change only when the
 * pending files do (an idle poll writes nothing).
 *
 * Reading.  fetch reads the batch's files one after the other, in chunks of
 * at most the batch's chunk size in records (StmPlanContext.chunk_size) and
 * about FILE_CHUNK_BYTES, so a file of any size needs the memory of one
 * chunk, never of the file.  Before and after reading, the file's size and
 * mtime must be those the plan saw; else the batch fails with a class 08
 * error (the stream waits and retries, and the next plan takes the file
 * once it has settled again).
 *
 * CSV goes through PostgreSQL's own COPY parser: BeginCopyFrom with a
 * data_source_cb that reads the file, then NextCopyFromRawFields for the
 * raw fields of each record, so quotes, escapes, quoted delimiters and line
 * breaks, an unquoted empty field as NULL and the header follow COPY FROM
 * ... (FORMAT csv) exactly; the fields go to the batch as they are
 * (StmRecord.fields) and parse.c converts them with the columns' input
 * functions.  Why not one record's text to parse.c's CSV splitter: that
 * splitter is hand-written for one Kafka message and differs from COPY
 * (quotes inside unquoted fields), it would split every record a second
 * time, and only COPY's reader knows where a record with quoted line breaks
 * ends.  Measured on 1M orders (5 columns) in 10 files, one batch into a
 * typed sink: with COPY's fields handed over the batch took 1.10 s, with
 * each record's text split again by parse.c 1.20 to 1.36 s.  bench/files.sh
 * puts the stream at 0.86 to 0.99 times the speed of COPY of the same files
 * in the same run (1M orders in 10 files), 1.07 for 1 GB in one file, with
 * 5 MB of private memory for 100 MB and for 1 GB.  What the COPY route
 * costs:
 *   - the raw record (for dead letters) and the physical line numbers come
 *     from CopyFromStateData (commands/copyfrom_internal.h): line_buf,
 *     eol_type, the input buffer's state.  Those fields exist in PG 15 to 17.
 *   - COPY treats a line "\." as the end of the data; in a file it is not:
 *     it becomes a record of one field "\." and reading goes on (COPY's
 *     state is left just after the marker).
 *   - the file is read as SQL_ASCII (every server encoding is ASCII-safe),
 *     so COPY does not stop at the first invalid byte: each record's
 *     encoding is checked by parse.c and a bad one is a bad record.
 *   - errors COPY cannot go past (line endings that change within the file,
 *     a zero byte, a record larger than streaming.max_record_size, which
 *     COPY would otherwise buffer whole) make the rest of the file one bad
 *     record at the line where it begins: COPY cannot resume inside a
 *     record.  They are caught in a subtransaction around each chunk's
 *     reading; any other error fails the batch.
 * JSON (one object per line) and text (one value per line) are split at
 * "\n" here (a "\r" before it is dropped), in a read buffer the records
 * point into; a line longer than streaming.max_record_size is a bad record
 * without being kept whole.  In csv and json files a line that holds
 * nothing is skipped (json: nothing but white space); it still counts for
 * file_line, the record's first physical line, the header being line 1.
 *
 * clean_source.  After the commit (after_commit, outside the batch's
 * transaction), and before each plan for what a crash or run_batch left,
 * files read by committed batches are deleted or moved into
 * archive_directory (hard link, or a copy across file systems, never over
 * an existing name: name.1, name.2, ...), once every stream of the source
 * has read them; streaming.files.cleaned_at records it.  A file whose size
 * or mtime no longer match what was read (a new file of the same name) is
 * left alone.  A clean-up that fails is a warning, tried again when the
 * source is opened again (a new worker, the next run_batch).
 *
 * Security.  Reading files needs the privileges of COPY FROM a file
 * (pg_read_server_files, or superuser), clean_source other than 'off'
 * those of COPY TO a file too (pg_write_server_files): checked at create
 * time for the creating role and whenever the source is opened, for the
 * source's and the stream's owners.  Files are read with the server's OS
 * identity, as COPY's.
 */
#include "postgres.h"

#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/copy.h"
#include "common/cryptohash.h"
#include "commands/copyfrom_internal.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "storage/fd.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "api.h"
#include "catalog.h"
#include "deadletter.h"
#include "fault.h"
#include "guc.h"
#include "options.h"
#include "positions.h"
#include "source.h"
#include "source_file.h"

PG_FUNCTION_INFO_V1(streaming_create_file_source);

/*
 * A chunk holds at most the batch's chunk size in records, and is handed
 * over sooner once its records hold about this much: a different limit,
 * the chunk's memory, which long lines reach before the count.
 */
#define FILE_CHUNK_BYTES (4 * 1024 * 1024)
#define READ_BUF_SIZE (1024 * 1024) /* json, text: bytes read at a time */

typedef enum FileClean
{
	CLEAN_OFF,
	CLEAN_DELETE,
	CLEAN_ARCHIVE
} FileClean;

/* A file of the directory, as a plan saw it. */
typedef struct FileEntry
{
	char	   *name;
	int64		size;
	TimestampTz mtime;
} FileEntry;

/* One file being read. */
typedef struct OneFile
{
	const char *source;			/* the source's name, for messages */
	int			fd;
	const char *path;
	int64		remaining;		/* bytes still to read (the planned size) */
	int64		done;			/* bytes read */
	bool		stopped;		/* the rest was not read (a bad record) */
	int64		line;			/* physical line where the next record starts */
	bool		header;			/* csv_header: the next record is the header */
	bool		eof;
	CopyFromState cstate;		/* csv */
} OneFile;

/* An open file source. */
typedef struct FileSource
{
	StmSource	base;			/* first: what the batch reads */
	MemoryContext cxt;			/* the source's own: lives as long as it */
	char	   *directory;
	char	   *pattern;
	bool		csv_header;
	char		delimiter[2];
	int64		max_files;		/* max_files_per_trigger; 0: none */
	bool		latest_first;
	int64		max_file_age_ms;	/* -1: none */
	FileClean	clean;
	char	   *archive_directory;
	Oid			view;			/* the source's view (COPY's template) */
	/* the last plan, in plan_cxt */
	MemoryContext plan_cxt;
	List	   *batch;			/* FileEntry: the batch's files, in order */
	List	   *pending;		/* FileEntry: seen, not read, not in the batch */
	List	   *skipped;		/* FileEntry: never to be read (max_file_age) */
	bool		pending_changed;	/* pending differs from streaming.positions */
	StringInfoData problem;		/* the files the plan could not open, and why */
	/* available_now: the settled files of the first plan */
	HTAB	   *allowed;
	/* names already reported in this runtime (clean-up failed, bad name) */
	HTAB	   *reported;
	/* fetch */
	MemoryContext batch_cxt;	/* current when the batch called fetch */
	MemoryContext fetch_cxt;	/* the file being read, reset per file */
	MemoryContext chunk_cxt;	/* the chunk being filled, reset per chunk */
	Datum		current_name;	/* file_name of the records handed over */
	int			chunk_size;		/* the batch's (the plan's, a helper's share's) */
	int			nrecords;
	Size		chunk_bytes;
	StmRecord  *records;		/* chunk_size of them, while fetching */
	int64	   *lines;			/* file_line of each record */
} FileSource;

/* A name kept in a FileSource's sets (file names are at most NAME_MAX bytes). */
typedef struct NameEntry
{
	char		name[NAME_MAX + 1];
} NameEntry;

/* COPY's data_source_cb has no argument: the file it reads is this one. */
static OneFile *csv_reading = NULL;

static void clean_files(FileSource *fs, int32 stream_id);
static List *list_directory(FileSource *fs);

/* ---- helpers ------------------------------------------------------------- */

static char *
file_path(const char *directory, const char *name)
{
	char	   *path = palloc(MAXPGPATH);

	join_path_components(path, directory, name);
	return path;
}

static TimestampTz
stat_mtime(const struct stat *st)
{
	return time_t_to_timestamptz(st->st_mtim.tv_sec) + st->st_mtim.tv_nsec / 1000;
}

static HTAB *
name_set(MemoryContext cxt, const char *what)
{
	HASHCTL		ctl;

	ctl.keysize = NAME_MAX + 1;
	ctl.entrysize = sizeof(NameEntry);
	ctl.hcxt = cxt;
	return hash_create(what, 64, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

static bool
name_in(HTAB *set, const char *name)
{
	return hash_search(set, name, HASH_FIND, NULL) != NULL;
}

/* Add name to set; false if it was there already. */
static bool
name_add(HTAB *set, const char *name)
{
	bool		found;

	(void) hash_search(set, name, HASH_ENTER, &found);
	return !found;
}

/* A List of C strings as a text[] */
static ArrayType *
text_array(List *strings)
{
	int			n = list_length(strings);
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));
	ListCell   *lc;

	if (n == 0)
		return construct_empty_array(TEXTOID);
	foreach(lc, strings)
		elems[foreach_current_index(lc)] = CStringGetTextDatum(lfirst(lc));
	return construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT);
}

/* An array of int8 or timestamptz (both 8 bytes, by value as float8 is) */
static ArrayType *
int8_like_array(Datum *elems, int n, Oid type)
{
	if (n == 0)
		return construct_empty_array(type);
	return construct_array(elems, n, type, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
}

/* The names, sizes and mtimes of FileEntry as three arrays, into values[0..2]. */
static void
entry_arrays(List *entries, Datum *values)
{
	int			n = list_length(entries);
	Datum	   *names = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *sizes = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *mtimes = palloc(sizeof(Datum) * Max(n, 1));
	ListCell   *lc;

	foreach(lc, entries)
	{
		FileEntry  *f = lfirst(lc);
		int			i = foreach_current_index(lc);

		names[i] = CStringGetTextDatum(f->name);
		sizes[i] = Int64GetDatum(f->size);
		mtimes[i] = TimestampTzGetDatum(f->mtime);
	}
	values[0] = PointerGetDatum(n == 0 ? construct_empty_array(TEXTOID) :
								construct_array(names, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[1] = PointerGetDatum(int8_like_array(sizes, n, INT8OID));
	values[2] = PointerGetDatum(int8_like_array(mtimes, n, TIMESTAMPTZOID));
}

/* The names, sizes and mtimes of FileEntry as a statement's :names, :sizes and :mtimes. */
static void
bind_entries(StmSql *q, List *entries)
{
	Datum		v[3];

	entry_arrays(entries, v);
	stm_sql_param(q, "names", TEXTARRAYOID, v[0], false);
	stm_sql_param(q, "sizes", INT8ARRAYOID, v[1], false);
	stm_sql_param(q, "mtimes", TIMESTAMPTZARRAYOID, v[2], false);
}

static void
unread_entry(void *arg, HeapTuple tuple, TupleDesc desc)
{
	List	  **entries = arg;
	FileEntry  *f = palloc(sizeof(FileEntry));
	bool		isnull;

	f->name = stm_sql_get_text(tuple, desc, "name");
	f->size = DatumGetInt64(stm_sql_get_datum(tuple, desc, "size", &isnull));
	f->mtime = DatumGetTimestampTz(stm_sql_get_datum(tuple, desc, "mtime", &isnull));
	*entries = lappend(*entries, f);
}

/*
 * The directory's files that the stream has not read (nor set aside), in
 * the order batches take them (FileEntry, in the current memory context).
 */
static List *
unread_files(FileSource *fs, int32 stream_id)
{
	List	   *entries = NIL;
	StmSql		q;

	stm_sql_init(&q, psprintf("SELECT f.name, f.size, f.mtime "
							  "FROM unnest(:names, :sizes, :mtimes) AS f(name, size, mtime) "
							  "WHERE NOT EXISTS (SELECT FROM streaming.files p "
							  "WHERE p.stream_id = :stream_id AND p.file_name = f.name) "
							  "ORDER BY f.mtime %s, f.name COLLATE \"C\"",
							  fs->latest_first ? "DESC" : "ASC"));
	stm_sql_int4(&q, "stream_id", stream_id);
	bind_entries(&q, list_directory(fs));
	(void) stm_catalog_run(&q, SPI_OK_SELECT, unread_entry, &entries);
	return entries;
}

/*
 * May role read server files, as COPY FROM a file needs (and, with write,
 * remove them, as writing them with COPY TO needs)?  Superusers may.
 */
static bool
may_use_files(Oid role, bool write)
{
	return has_privs_of_role(role, ROLE_PG_READ_SERVER_FILES) &&
		(!write || has_privs_of_role(role, ROLE_PG_WRITE_SERVER_FILES));
}

/*
 * The directory's files that may be read (regular files whose names match
 * the pattern, do not start with "." or "_" and are valid in the database
 * encoding), as FileEntry.  A directory that cannot be read is a source
 * that cannot be reached (class 08: the stream waits).
 */
static List *
list_directory(FileSource *fs)
{
	DIR		   *dir = AllocateDir(fs->directory);
	struct dirent *de;
	List	   *result = NIL;

	if (dir == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not open directory \"%s\" of source \"%s\": %m",
						fs->directory, fs->base.name)));
	while ((de = ReadDir(dir, fs->directory)) != NULL)
	{
		struct stat st;
		FileEntry  *f;
		char	   *path;

		if (de->d_name[0] == '.' || de->d_name[0] == '_' ||
			fnmatch(fs->pattern, de->d_name, 0) != 0)
			continue;
		path = file_path(fs->directory, de->d_name);
		/* gone since readdir, a subdirectory, a socket: nothing to read */
		if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		if (!pg_verifymbstr(de->d_name, strlen(de->d_name), true))
		{
			if (name_add(fs->reported, de->d_name))
				ereport(WARNING,
						(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
						 errmsg("file name in directory \"%s\" of source \"%s\" is not valid in the database encoding",
								fs->directory, fs->base.name),
						 errdetail("The file is not read.")));
			continue;
		}
		f = palloc(sizeof(FileEntry));
		f->name = pstrdup(de->d_name);
		f->size = st.st_size;
		f->mtime = stat_mtime(&st);
		result = lappend(result, f);
	}
	FreeDir(dir);
	return result;
}

/*
 * Can the server open the file for reading now?  One it cannot (its
 * permissions, say) is held back from the batch and named in the plan's
 * problem, so that the other files are read on (SPEC 4); it is read once
 * it can be opened.
 */
static bool
file_readable(FileSource *fs, FileEntry *f)
{
	char	   *path = file_path(fs->directory, f->name);
	int			fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);

	if (fd >= 0)
	{
		CloseTransientFile(fd);
		return true;
	}
	appendStringInfo(&fs->problem, "%sfile \"%s\" of source \"%s\" cannot be opened: %m",
					 fs->problem.len > 0 ? "; " : "", f->name, fs->base.name);
	return false;
}

/* ---- open ---------------------------------------------------------------- */

/*
 * open: the source's options, and the privileges to read (and clean) files
 * checked again for the source's and the stream's owners (SPEC 7: a stored
 * definition changed behind the functions' back reads no file).
 */
static StmSource *
file_open(StmSource *base, bool for_batches)
{
	FileSource *fs = palloc0(sizeof(FileSource));
	Jsonb	   *o = base->options;
	char	   *clean = stm_option_text(o, "clean_source");
	char	   *delimiter = stm_option_text(o, "csv_delimiter");
	Oid			roles[2] = {base->owner, base->stream_owner};
	List	   *view;

	fs->base = *base;
	fs->cxt = CurrentMemoryContext;
	fs->directory = stm_option_text(o, "directory");
	fs->pattern = stm_option_text(o, "pattern");
	fs->csv_header = stm_option_bool(o, "csv_header", false);
	fs->delimiter[0] = delimiter ? delimiter[0] : ',';
	fs->max_files = stm_option_int64(o, "max_files_per_trigger", 0);
	fs->latest_first = stm_option_bool(o, "latest_first", false);
	fs->max_file_age_ms = stm_option_interval_ms(o, "max_file_age", -1);
	fs->clean = clean == NULL || strcmp(clean, "off") == 0 ? CLEAN_OFF :
		strcmp(clean, "delete") == 0 ? CLEAN_DELETE : CLEAN_ARCHIVE;
	fs->archive_directory = stm_option_text(o, "archive_directory");
	if (fs->directory == NULL || fs->pattern == NULL ||
		(fs->clean == CLEAN_ARCHIVE && fs->archive_directory == NULL))
		elog(ERROR, "file source \"%s\" has incomplete options", base->name);

	for (int i = 0; i < 2; i++)
	{
		const char *role = OidIsValid(roles[i]) ? GetUserNameFromId(roles[i], true) : NULL;

		if (OidIsValid(roles[i]) && !may_use_files(roles[i], fs->clean != CLEAN_OFF))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("role \"%s\" may not read the files of source \"%s\"",
							role ? role : "?", base->name),
					 fs->clean == CLEAN_OFF ?
					 errdetail("Reading server files needs superuser or the privileges of the pg_read_server_files role, as COPY FROM a file does.") :
					 errdetail("Reading server files needs superuser or the privileges of the pg_read_server_files role, and clean_source those of pg_write_server_files."),
					 errhint("Grant the role those privileges, or drop the source.")));
	}

	view = stm_catalog_source_option_list(base->name, "SELECT s.view::oid::text");
	if (view == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("source \"%s\" does not exist", base->name)));
	fs->view = atooid(((char **) linitial(view))[0]);

	initStringInfo(&fs->problem);
	fs->plan_cxt = AllocSetContextCreate(fs->cxt, "streaming file plan", ALLOCSET_DEFAULT_SIZES);
	fs->fetch_cxt = AllocSetContextCreate(fs->cxt, "streaming file read", ALLOCSET_DEFAULT_SIZES);
	/* a large first block survives each reset: no malloc churn per chunk */
	fs->chunk_cxt = AllocSetContextCreate(fs->cxt, "streaming file chunk",
										  0, 1024 * 1024, 8 * 1024 * 1024);
	fs->reported = name_set(fs->cxt, "streaming reported file names");
	return &fs->base;
}

/* ---- plan ---------------------------------------------------------------- */

/* A pending file's stored size (its end position), by name. */
typedef struct PendingSize
{
	char		name[NAME_MAX + 1];
	bool		has_size;
	int64		size;
} PendingSize;

/* The stored positions (pending files) by name, in the current memory context. */
static HTAB *
pending_set(List *stored)
{
	HASHCTL		ctl;
	HTAB	   *set;
	ListCell   *lc;

	ctl.keysize = NAME_MAX + 1;
	ctl.entrysize = sizeof(PendingSize);
	ctl.hcxt = CurrentMemoryContext;
	set = hash_create("streaming pending files", Max(list_length(stored), 16), &ctl,
					  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	foreach(lc, stored)
	{
		StmPosition *pos = lfirst(lc);
		PendingSize *e;

		/* a file is a part of one number: 0 */
		if (pos->part_no != 0 || strlen(pos->part) > NAME_MAX)
			continue;
		e = hash_search(set, pos->part, HASH_ENTER, NULL);
		e->has_size = pos->has_end;
		e->size = pos->end_position;
	}
	return set;
}

/*
 * Fix the next batch: clean what earlier batches left, list the directory,
 * leave out what the stream has read or will never read, note files too
 * old when first seen, take the settled ones in order, at most
 * max_files_per_trigger (available_now: only files settled at its first
 * plan).  Returns the batch's bytes plus one per file (an upper bound of
 * its records, and not 0 for an empty file), 0 when there is no batch.
 */
static int64
file_plan(StmSource *src, StmPlanContext *ctx)
{
	FileSource *fs = (FileSource *) src;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz settled_before = now - (TimestampTz) stm_guc_file_settle_time_ms * 1000;
	List	   *stored;
	HTAB	   *pending_sizes;
	int64		unchanged = 0;
	int64		total = 0;
	int			nheld = 0;		/* settled files that cannot be opened */
	int			nreadable = 0;	/* the other files the plan saw */
	bool		fix_allowed;
	MemoryContext oldcxt;
	ListCell   *lc;

	fs->chunk_size = ctx->chunk_size;
	if (fs->clean != CLEAN_OFF)
		clean_files(fs, ctx->stream_id);

	MemoryContextReset(fs->plan_cxt);
	oldcxt = MemoryContextSwitchTo(fs->plan_cxt);
	fs->batch = fs->pending = fs->skipped = NIL;
	resetStringInfo(&fs->problem);
	/* available_now: the files there (and settled) when it starts */
	fix_allowed = fs->base.bounded && fs->allowed == NULL;
	if (fix_allowed)
		fs->allowed = name_set(fs->cxt, "streaming available_now files");

	/* the pending files as the last plan stored them, and their sizes then */
	stored = stm_positions_read(ctx->stream_id, fs->base.name);
	pending_sizes = pending_set(stored);
	foreach(lc, unread_files(fs, ctx->stream_id))
	{
		FileEntry  *f = lfirst(lc);
		PendingSize *seen = hash_search(pending_sizes, f->name, HASH_FIND, NULL);
		bool		settled;

		/* max_file_age counts when the stream first sees a file */
		if (!seen && fs->max_file_age_ms >= 0 && now - f->mtime > fs->max_file_age_ms * 1000)
		{
			fs->skipped = lappend(fs->skipped, f);
			continue;
		}
		if (seen && seen->has_size && seen->size == f->size)
			unchanged++;
		settled = f->mtime <= settled_before;
		if (fix_allowed && settled)
			(void) name_add(fs->allowed, f->name);
		if (settled && (fs->allowed == NULL || name_in(fs->allowed, f->name)) &&
			(fs->max_files == 0 || list_length(fs->batch) < fs->max_files))
		{
			if (file_readable(fs, f))
			{
				fs->batch = lappend(fs->batch, f);
				total += f->size + 1;
				nreadable++;
			}
			else
			{
				fs->pending = lappend(fs->pending, f);
				nheld++;
			}
		}
		else
		{
			fs->pending = lappend(fs->pending, f);
			nreadable++;		/* to be read later, as far as we know */
		}
	}
	/* held back files are source_error; only they left: the stream waits */
	fs->base.problem = nheld > 0 ? fs->problem.data : NULL;
	fs->base.unreadable = nheld > 0 && nreadable == 0;
	/* what streaming.positions holds is not the pending files now */
	fs->pending_changed = list_length(stored) != unchanged ||
		unchanged != list_length(fs->pending) + list_length(fs->batch);
	hash_destroy(pending_sizes);
	list_free_deep(stored);
	foreach(lc, fs->skipped)
		ereport(LOG,
				(errmsg("file \"%s\" of source \"%s\" is older than max_file_age when first seen: it is never read",
						((FileEntry *) lfirst(lc))->name, fs->base.name)));
	MemoryContextSwitchTo(oldcxt);
	return total;
}

/*
 * The files the batch read (batch_id >= 0) and those never to be read in
 * streaming.files; the pending ones, and no others, in streaming.positions
 * (each at byte 0 of its size).  In the current transaction, as the
 * extension's owner.
 */
static void
write_positions(FileSource *fs, int32 stream_id, int64 batch_id)
{
	List	   *read = batch_id >= 0 ? fs->batch : NIL;
	List	   *files = list_concat_copy(read, fs->skipped);
	List	   *pending = NIL;
	ListCell   *lc;

	/* the batch's files (the first :nread) with its id, the skipped ones with NULL */
	if (files != NIL)
	{
		StmSql		q;

		stm_sql_init(&q, "INSERT INTO streaming.files (stream_id, file_name, size, mtime, batch_id) "
					 "SELECT :stream_id, f.name, f.size, f.mtime, CASE WHEN f.n <= :nread THEN :batch_id END "
					 "FROM unnest(:names, :sizes, :mtimes) WITH ORDINALITY AS f(name, size, mtime, n)");
		stm_sql_int4(&q, "stream_id", stream_id);
		stm_sql_int4(&q, "nread", list_length(read));
		stm_sql_param(&q, "batch_id", INT8OID, Int64GetDatum(batch_id), batch_id < 0);
		bind_entries(&q, files);
		(void) stm_catalog_run(&q, SPI_OK_INSERT, NULL, NULL);
	}
	foreach(lc, fs->pending)
	{
		FileEntry  *f = lfirst(lc);

		pending = lappend(pending, stm_position_make(f->name, 0, 0, f->size));
	}
	stm_positions_replace(stream_id, fs->base.name, pending);
	list_free_deep(pending);
}

static void
file_save_positions(StmSource *src, int32 stream_id, int64 batch_id)
{
	write_positions((FileSource *) src, stream_id, batch_id);
}

/* No batch: record what the plan learnt, when anything changed. */
static void
file_save_idle_positions(StmSource *src, int32 stream_id)
{
	FileSource *fs = (FileSource *) src;

	if (fs->skipped != NIL || fs->pending_changed)
		write_positions(fs, stream_id, -1);
}

/* {"name": bytes, ...}: the batch's files, at 0 at its start and at their size at its end */
static char *
file_positions_json(StmSource *src, bool end)
{
	FileSource *fs = (FileSource *) src;
	StringInfoData buf;
	ListCell   *lc;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	foreach(lc, fs->batch)
	{
		FileEntry  *f = lfirst(lc);

		if (buf.len > 1)
			appendStringInfoString(&buf, ", ");
		escape_json(&buf, f->name);
		appendStringInfo(&buf, ": " INT64_FORMAT, end ? f->size : 0);
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/* ---- fetch --------------------------------------------------------------- */

/*
 * Give the records gathered so far to the batch, in the memory context that
 * was current when it called fetch (what it allocates there is its own);
 * the records' memory goes after.
 */
static void
hand_chunk(FileSource *fs, StmChunkFn fn, void *arg)
{
	if (fs->nrecords > 0)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(fs->batch_cxt);

		fn(arg, fs->records, fs->nrecords);
		MemoryContextSwitchTo(oldcxt);
	}
	fs->nrecords = 0;
	fs->chunk_bytes = 0;
	MemoryContextReset(fs->chunk_cxt);
}

static bool
chunk_full(FileSource *fs)
{
	return fs->nrecords >= fs->chunk_size || fs->chunk_bytes >= FILE_CHUNK_BYTES;
}

/* The chunk's next record, starting at a line. */
static StmRecord *
new_record(FileSource *fs, int64 line, const char *data, int len)
{
	StmRecord  *rec = &fs->records[fs->nrecords];

	memset(rec, 0, sizeof(StmRecord));
	rec->data = data;
	rec->len = len;
	fs->lines[fs->nrecords] = line;
	rec->opaque = &fs->lines[fs->nrecords];
	fs->nrecords++;
	fs->chunk_bytes += len;
	return rec;
}

/*
 * A record that could not be read: edata is its error; of raw, the first
 * STM_RAW_KEEP bytes go to dead letters, and whole (when raw is not all of it,
 * in the chunk's memory) says what the whole record was.
 */
static void
add_unreadable(FileSource *fs, int64 line, ErrorData *edata, const char *raw, Size len,
			   StmRecordDigest *whole)
{
	int			keep = (int) Min(len, STM_RAW_KEEP);
	char	   *copy = MemoryContextAlloc(fs->chunk_cxt, keep + 1);
	StmRecord  *rec;

	memcpy(copy, raw, keep);
	copy[keep] = '\0';
	rec = new_record(fs, line, copy, keep);
	rec->error = edata;
	rec->whole = whole;
}

/* The SHA-256 of a record read in pieces (a line too long, the rest of a file). */
static pg_cryptohash_ctx *
digest_begin(void)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

	if (pg_cryptohash_init(ctx) < 0)
		elog(ERROR, "could not compute a SHA-256: %s", pg_cryptohash_error(ctx));
	return ctx;
}

static void
digest_add(pg_cryptohash_ctx *ctx, StmRecordDigest *d, const char *data, Size len)
{
	if (pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0)
		elog(ERROR, "could not compute a SHA-256: %s", pg_cryptohash_error(ctx));
	d->length += len;
}

static StmRecordDigest *
digest_end(FileSource *fs, pg_cryptohash_ctx *ctx, StmRecordDigest *d)
{
	StmRecordDigest *result = MemoryContextAlloc(fs->chunk_cxt, sizeof(StmRecordDigest));

	if (pg_cryptohash_final(ctx, d->sha256, sizeof(d->sha256)) < 0)
		elog(ERROR, "could not compute a SHA-256: %s", pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
	*result = *d;
	return result;
}

/*
 * The error of a line longer than streaming.max_record_size, which is not
 * kept whole: raised and caught, as any other record's error is.
 */
static ErrorData *
record_size_error(FileSource *fs, int64 len)
{
	MemoryContext cxt = CurrentMemoryContext;
	ErrorData  *edata = NULL;

	PG_TRY();
	{
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("record of " INT64_FORMAT " bytes is larger than streaming.max_record_size (%d bytes)",
						len, stm_guc_max_record_size)));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(fs->chunk_cxt);
		edata = CopyErrorData();
		FlushErrorState();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	return edata;
}

/* Read up to len bytes of the file, never past its planned size; 0 at its end. */
static int
read_some(OneFile *r, char *buf, int len)
{
	ssize_t		n;

	if (r->remaining <= 0)
	{
		r->eof = true;
		return 0;
	}
	do
		n = read(r->fd, buf, (size_t) Min((int64) len, r->remaining));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not read file \"%s\" of source \"%s\": %m", r->path, r->source)));
	if (n == 0)
		r->eof = true;			/* shorter than planned: checked after */
	r->remaining -= n;
	r->done += n;
	return (int) n;
}

/* COPY's data_source_cb: the next bytes of the file being read. */
static int
csv_read_cb(void *outbuf, int minread, int maxread)
{
	OneFile   *r = csv_reading;

	/*
	 * COPY keeps a record whole in line_buf (which holds the record so far
	 * when COPY asks for more): stop a record larger than records may be
	 * before it takes more memory.
	 */
	if (r->cstate && r->cstate->line_buf.len > stm_guc_max_record_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("record of more than %d bytes is larger than streaming.max_record_size (%d bytes)",
						r->cstate->line_buf.len, stm_guc_max_record_size)));
	return read_some(r, outbuf, maxread);
}

/* Has COPY read the whole file (and not only stopped at a "\." line)? */
static bool
csv_at_end(CopyFromState cstate)
{
	return cstate->input_reached_eof && INPUT_BUF_BYTES(cstate) == 0;
}

/* The physical lines of the record in line_buf (its line breaks in quotes). */
static int64
csv_record_lines(CopyFromState cstate)
{
	char		eol = cstate->eol_type == EOL_CR ? '\r' : '\n';
	const char *p = cstate->line_buf.data;
	const char *end = p + cstate->line_buf.len;
	int64		n = 1;

	while ((p = memchr(p, eol, end - p)) != NULL)
	{
		n++;
		p++;
	}
	return n;
}

/*
 * The record COPY read, into the chunk: its raw text (line_buf) and its
 * fields (in attribute_buf), in one allocation.
 */
static void
add_csv_record(FileSource *fs, CopyFromState cstate, char **fields, int nfields, int64 line)
{
	int			linelen = cstate->line_buf.len;
	/* COPY's len leaves out the last field's terminating zero byte */
	int			attrlen = cstate->attribute_buf.len + 1;
	char	  **copy = MemoryContextAlloc(fs->chunk_cxt,
										  sizeof(char *) * nfields + attrlen + linelen + 1);
	char	   *attr = (char *) (copy + nfields);
	char	   *raw = attr + attrlen;
	StmRecord  *rec;

	memcpy(attr, cstate->attribute_buf.data, attrlen);
	for (int i = 0; i < nfields; i++)
		copy[i] = fields[i] ? attr + (fields[i] - cstate->attribute_buf.data) : NULL;
	memcpy(raw, cstate->line_buf.data, linelen);
	raw[linelen] = '\0';
	rec = new_record(fs, line, raw, linelen);
	rec->fields = copy;
	rec->nfields = nfields;
	fs->chunk_bytes += attrlen;
}

/*
 * Where COPY stopped with an error: the record so far (line_buf) and the
 * input it had not looked at yet (the file is read as SQL_ASCII, so the
 * input buffer is the raw one), up to STM_RAW_KEEP bytes.
 */
static char *
csv_rest(CopyFromState cstate, Size *len)
{
	char	   *rest = palloc(STM_RAW_KEEP);
	int			n = Min(cstate->line_buf.len, STM_RAW_KEEP);

	memcpy(rest, cstate->line_buf.data, n);
	Assert(cstate->input_buf == cstate->raw_buf);
	if (cstate->input_buf_index < cstate->raw_buf_len)
	{
		int			more = Min(cstate->raw_buf_len - cstate->input_buf_index, STM_RAW_KEEP - n);

		memcpy(rest + n, cstate->raw_buf + cstate->input_buf_index, more);
		n += more;
	}
	*len = n;
	return rest;
}

/*
 * What the rest of the file from the record COPY stopped at is (its bad
 * record): what COPY holds of it, then the file to its end.
 */
static StmRecordDigest *
csv_rest_digest(FileSource *fs, OneFile *r)
{
	CopyFromState cstate = r->cstate;
	pg_cryptohash_ctx *ctx = digest_begin();
	StmRecordDigest d = {0};
	char	   *buf = palloc(READ_BUF_SIZE);
	int			n;

	digest_add(ctx, &d, cstate->line_buf.data, cstate->line_buf.len);
	if (cstate->input_buf_index < cstate->raw_buf_len)
		digest_add(ctx, &d, cstate->raw_buf + cstate->input_buf_index,
				   cstate->raw_buf_len - cstate->input_buf_index);
	while ((n = read_some(r, buf, READ_BUF_SIZE)) > 0)
		digest_add(ctx, &d, buf, n);
	pfree(buf);
	return digest_end(fs, ctx, &d);
}

/*
 * COPY's options for a source's files: CSV with the delimiter, read as
 * SQL_ASCII (each record's encoding is checked by parse.c).
 */
static List *
csv_options(const char *delimiter)
{
	return list_make3(makeDefElem("format", (Node *) makeString("csv"), -1),
					  makeDefElem("delimiter", (Node *) makeString(pstrdup(delimiter)), -1),
					  makeDefElem("encoding", (Node *) makeString("SQL_ASCII"), -1));
}

/* Errors of COPY's reading that make the rest of the file a bad record. */
static bool
csv_data_error(int sqlerrcode)
{
	return ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_DATA_EXCEPTION ||
		sqlerrcode == ERRCODE_PROGRAM_LIMIT_EXCEEDED;
}

/*
 * Read up to a chunk of records with COPY; false at the end of the file.
 * The header is skipped, lines that hold nothing too; a "\." line, the end
 * of COPY's data, is a record of that one field.
 */
static bool
csv_read_chunk(FileSource *fs, OneFile *r)
{
	CopyFromState cstate = r->cstate;

	while (!chunk_full(fs))
	{
		char	  **fields;
		int			nfields;
		int64		lines;

		if (!NextCopyFromRawFields(cstate, &fields, &nfields))
		{
			static char marker[] = "\\.";
			char	   *marker_field = marker;

			if (csv_at_end(cstate))
				return false;
			/* "\." and its line break were consumed: the next line is next */
			if (r->header)
				r->header = false;
			else
			{
				resetStringInfo(&cstate->line_buf);
				appendStringInfoString(&cstate->line_buf, marker);
				resetStringInfo(&cstate->attribute_buf);
				appendBinaryStringInfo(&cstate->attribute_buf, marker, sizeof(marker));
				marker_field = cstate->attribute_buf.data;
				add_csv_record(fs, cstate, &marker_field, 1, r->line);
			}
			r->line++;
			continue;
		}
		lines = csv_record_lines(cstate);
		if (r->header)
			r->header = false;
		else if (cstate->line_buf.len > 0)
			add_csv_record(fs, cstate, fields, nfields, r->line);
		r->line += lines;
	}
	return true;
}

/*
 * A CSV file through COPY's parser, a chunk at a time, each chunk read in a
 * subtransaction: COPY's errors about the data end the file with the rest
 * of it as one bad record, anything else fails the batch.
 */
static void
read_csv(FileSource *fs, OneFile *r, StmChunkFn fn, void *arg)
{
	Relation	view = relation_open(fs->view, AccessShareLock);
	volatile bool more = true;

	/* the view's columns are COPY's template; no column has a default */
	r->cstate = BeginCopyFrom(NULL, view, NULL, NULL, false, csv_read_cb, NIL,
							  csv_options(fs->delimiter));
	r->header = fs->csv_header;
	while (more)
	{
		MemoryContext oldcxt = CurrentMemoryContext;
		ResourceOwner oldowner = CurrentResourceOwner;

		CHECK_FOR_INTERRUPTS();
		BeginInternalSubTransaction(NULL);
		MemoryContextSwitchTo(oldcxt);
		csv_reading = r;
		PG_TRY();
		{
			more = csv_read_chunk(fs, r);
			ReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(oldcxt);
			CurrentResourceOwner = oldowner;
		}
		PG_CATCH();
		{
			ErrorData  *edata;
			char	   *raw;
			Size		rawlen;

			MemoryContextSwitchTo(fs->chunk_cxt);
			edata = CopyErrorData();
			FlushErrorState();
			RollbackAndReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(oldcxt);
			CurrentResourceOwner = oldowner;
			csv_reading = NULL;
			if (!csv_data_error(edata->sqlerrcode))
				ReThrowError(edata);
			/* read as SQL_ASCII, the one invalid byte is a zero byte */
			if (edata->sqlerrcode == ERRCODE_CHARACTER_NOT_IN_REPERTOIRE)
				edata->message = MemoryContextStrdup(fs->chunk_cxt, "record contains a zero byte");
			edata->detail = MemoryContextStrdup(fs->chunk_cxt,
												psprintf("COPY cannot read past this point, so the rest of the file, from line " INT64_FORMAT ", is this one bad record.",
														 r->line));
			raw = csv_rest(r->cstate, &rawlen);
			add_unreadable(fs, r->line, edata, raw, rawlen, csv_rest_digest(fs, r));
			r->stopped = true;
			more = false;
		}
		PG_END_TRY();
		csv_reading = NULL;
		hand_chunk(fs, fn, arg);
		if (more)
			STM_FAULT_POINT("mid_file");
	}
	EndCopyFrom(r->cstate);
	r->cstate = NULL;
	relation_close(view, NoLock);
}

/* A json line that holds nothing but white space is skipped. */
static bool
blank(const char *p, Size len)
{
	for (Size i = 0; i < len; i++)
		if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
			return false;
	return true;
}

/*
 * json and text: one record per line, split at "\n" (a "\r" before it is
 * dropped), in a buffer the chunk's records point into: the chunk is
 * handed before the buffer moves.  A line that does not fit in
 * streaming.max_record_size is skipped to its end, its first STM_RAW_KEEP bytes
 * kept for the bad record it is.
 */
static void
read_lines(FileSource *fs, OneFile *r, StmChunkFn fn, void *arg)
{
	bool		json = fs->base.format == STM_FORMAT_JSON;
	Size		size = READ_BUF_SIZE;
	char	   *buf = MemoryContextAlloc(fs->fetch_cxt, size);
	Size		start = 0;		/* the line being looked at */
	Size		len = 0;		/* bytes in buf */
	Size		max_line = (Size) stm_guc_max_record_size + 1;
	bool		skipping = false;	/* in a line too long for a record */
	char	   *head = NULL;	/* its first STM_RAW_KEEP bytes */
	pg_cryptohash_ctx *digest = NULL;	/* and all of it */
	StmRecordDigest whole = {0};

	for (;;)
	{
		char	   *nl = start < len ? memchr(buf + start, '\n', len - start) : NULL;
		Size		end;

		if (nl == NULL && !r->eof)
		{
			/* the records point into buf: hand them over before it moves */
			hand_chunk(fs, fn, arg);
			STM_FAULT_POINT("mid_file");
			if (skipping)
			{
				digest_add(digest, &whole, buf + start, len - start);
				start = len;
			}
			memmove(buf, buf + start, len - start);
			len -= start;
			start = 0;
			if (len == size && size >= max_line)
			{
				/* too long for a record: keep its start, skip the rest */
				if (head == NULL)
					head = MemoryContextAlloc(fs->fetch_cxt, STM_RAW_KEEP);
				memcpy(head, buf, STM_RAW_KEEP);
				skipping = true;
				digest = digest_begin();
				memset(&whole, 0, sizeof(whole));
				digest_add(digest, &whole, buf, len);
				len = 0;
			}
			else if (len == size)
			{
				size = Min(size * 2, max_line);
				buf = repalloc(buf, size);
			}
			len += read_some(r, buf + len, (int) Min(size - len, (Size) INT_MAX));
			continue;
		}
		if (nl == NULL && start == len && !skipping)
			break;				/* the end, after a line break */
		end = nl ? nl - buf : len;
		if (skipping)
		{
			/* the line's end, without its line break (and a \r before it) */
			Size		last = end - start;

			if (last > 0 && buf[end - 1] == '\r')
				last--;
			digest_add(digest, &whole, buf + start, last);
			add_unreadable(fs, r->line, record_size_error(fs, whole.length),
						   head, STM_RAW_KEEP, digest_end(fs, digest, &whole));
			digest = NULL;
			skipping = false;
		}
		else
		{
			Size		linelen = end - start;

			if (linelen > 0 && buf[end - 1] == '\r')
				linelen--;
			if (!json || !blank(buf + start, linelen))
				new_record(fs, r->line, buf + start, (int) linelen);
		}
		r->line++;
		if (nl == NULL)
			break;				/* a last line without a line break counts too */
		start = end + 1;
		if (chunk_full(fs))
			hand_chunk(fs, fn, arg);
	}
	hand_chunk(fs, fn, arg);
}

/* Is the file still the one the plan saw? */
static bool
unchanged(int fd, FileEntry *f)
{
	struct stat st;

	return fstat(fd, &st) == 0 && st.st_size == f->size && stat_mtime(&st) == f->mtime;
}

/*
 * Read one file of the batch, whole: as the plan saw it (else the batch
 * fails with a class 08 error and is retried, the file taken again once it
 * has settled).
 */
static void
read_file(FileSource *fs, FileEntry *f, StmChunkFn fn, void *arg)
{
	OneFile	r = {0};
	MemoryContext oldcxt;

	r.source = fs->base.name;
	r.path = file_path(fs->directory, f->name);
	r.remaining = f->size;
	r.line = 1;
	r.fd = OpenTransientFile(r.path, O_RDONLY | PG_BINARY);
	if (r.fd < 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not open file \"%s\" of source \"%s\": %m", r.path, fs->base.name)));
	if (!unchanged(r.fd, f))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("file \"%s\" of source \"%s\" changed after the batch was planned", r.path, fs->base.name),
				 errdetail("A file is read once it has not changed for streaming.file_settle_time.")));
	/* rows may keep the name past the file's reading: it lives until the next plan */
	oldcxt = MemoryContextSwitchTo(fs->plan_cxt);
	fs->current_name = CStringGetTextDatum(f->name);
	MemoryContextSwitchTo(oldcxt);
	if (fs->base.format == STM_FORMAT_CSV)
		read_csv(fs, &r, fn, arg);
	else
		read_lines(fs, &r, fn, arg);
	if (!unchanged(r.fd, f) || (!r.stopped && r.done != f->size))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("file \"%s\" of source \"%s\" changed while it was read", r.path, fs->base.name),
				 errdetail("A file is read once it has not changed for streaming.file_settle_time.")));
	CloseTransientFile(r.fd);
}

/* Read the batch's files, one after the other, handing chunks of records to fn. */
static void
file_fetch(StmSource *src, StmChunkFn fn, void *arg)
{
	FileSource *fs = (FileSource *) src;
	MemoryContext oldcxt;
	ListCell   *lc;

	fs->batch_cxt = CurrentMemoryContext;
	/* what an earlier, failed fetch left goes now */
	MemoryContextReset(fs->fetch_cxt);
	MemoryContextReset(fs->chunk_cxt);
	fs->nrecords = 0;
	fs->chunk_bytes = 0;
	/* the chunk's arrays, in the batch's memory (an error leaves them to it) */
	Assert(fs->chunk_size > 0);
	fs->records = palloc(sizeof(StmRecord) * fs->chunk_size);
	fs->lines = palloc(sizeof(int64) * fs->chunk_size);
	oldcxt = MemoryContextSwitchTo(fs->fetch_cxt);
	foreach(lc, fs->batch)
	{
		read_file(fs, lfirst(lc), fn, arg);
		MemoryContextReset(fs->fetch_cxt);
	}
	MemoryContextSwitchTo(oldcxt);
	pfree(fs->records);
	pfree(fs->lines);
	fs->records = NULL;
	fs->lines = NULL;
}

/*
 * Parallel helpers: the batch's files split by file into nshares
 * contiguous runs in the batch's order, share s taking files [s N /
 * nshares, (s + 1) N / nshares) of N (ordered_parts: dedup_keys, whose
 * first row of a key is the first in file order, reads the shares one
 * after another in batch.c), as lines "size mtime name" (what read_file checks
 * the file against; in the name '%' and newline are written %25 and %0A)
 * after the batch's chunk size.  A helper reads whole files; the leader
 * still plans, stores the files read and cleans up after the commit.
 */
static char *
file_share_bounds(StmSource *src, int share, int nshares)
{
	FileSource *fs = (FileSource *) src;
	StringInfoData buf;
	ListCell   *lc;
	int			nfiles = list_length(fs->batch);
	int			first = (int) ((int64) nfiles * share / nshares);
	int			last = (int) ((int64) nfiles * (share + 1) / nshares);

	initStringInfo(&buf);
	stm_source_share_begin(&buf, fs->chunk_size);
	foreach(lc, fs->batch)
	{
		FileEntry  *f = lfirst(lc);

		if (foreach_current_index(lc) < first || foreach_current_index(lc) >= last)
			continue;
		appendStringInfo(&buf, INT64_FORMAT " " INT64_FORMAT " ", f->size, (int64) f->mtime);
		for (const char *c = f->name; *c; c++)
		{
			if (*c == '%')
				appendStringInfoString(&buf, "%25");
			else if (*c == '\n')
				appendStringInfoString(&buf, "%0A");
			else
				appendStringInfoChar(&buf, *c);
		}
		appendStringInfoChar(&buf, '\n');
	}
	return buf.data;
}

/* A helper's share: exactly these files with the next fetch. */
static void
file_set_share_bounds(StmSource *src, const char *bounds)
{
	FileSource *fs = (FileSource *) src;
	const char *line = stm_source_share_chunk_size(bounds, &fs->chunk_size);
	MemoryContext oldcxt;

	MemoryContextReset(fs->plan_cxt);
	fs->batch = fs->pending = fs->skipped = NIL;
	oldcxt = MemoryContextSwitchTo(fs->plan_cxt);
	while (*line)
	{
		const char *eol = strchr(line, '\n');
		char	   *copy = pnstrdup(line, eol ? eol - line : strlen(line));
		char	   *size_s = strtok(copy, " ");
		char	   *mtime_s = strtok(NULL, " ");
		char	   *name = mtime_s ? mtime_s + strlen(mtime_s) + 1 : NULL;
		FileEntry  *f = palloc(sizeof(FileEntry));

		if (size_s == NULL || mtime_s == NULL || *name == '\0')
			elog(ERROR, "malformed share bounds: %s", line);
		f->size = pg_strtoint64(size_s);
		f->mtime = (TimestampTz) pg_strtoint64(mtime_s);
		f->name = palloc(strlen(name) + 1);
		{
			char	   *d = f->name;

			for (const char *c = name; *c; c++)
			{
				if (c[0] == '%' && c[1] == '2' && c[2] == '5')
					*d++ = '%', c += 2;
				else if (c[0] == '%' && c[1] == '0' && c[2] == 'A')
					*d++ = '\n', c += 2;
				else
					*d++ = *c;
			}
			*d = '\0';
		}
		fs->batch = lappend(fs->batch, f);
		line = eol ? eol + 1 : line + strlen(line);
	}
	MemoryContextSwitchTo(oldcxt);
}

/* Parallel helpers: the batch's files (a helper reads whole files). */
static int
file_share_parts(StmSource *src)
{
	return list_length(((FileSource *) src)->batch);
}

/* file_name, file_line */
static void
file_fill_metadata(StmSource *src, StmRecord *rec, Datum *values, bool *nulls)
{
	FileSource *fs = (FileSource *) src;

	values[0] = fs->current_name;
	nulls[0] = false;
	values[1] = Int64GetDatum(*(int64 *) rec->opaque);
	nulls[1] = false;
}

/* {"file": name, "line": n}, from file_name and file_line */
static void
file_position_json(StmSource *src, const Datum *meta, const bool *meta_nulls, StringInfo out)
{
	appendStringInfoString(out, "{\"file\": ");
	escape_json(out, TextDatumGetCString(meta[0]));
	appendStringInfo(out, ", \"line\": " INT64_FORMAT "}", DatumGetInt64(meta[1]));
}

/* ---- clean_source -------------------------------------------------------- */

/* What became of a file clean_source was to remove. */
typedef enum CleanResult
{
	CLEANED,					/* deleted or archived */
	CLEAN_GONE,					/* not there any more, or another file now */
	CLEAN_FAILED				/* reported: tried again in a later runtime */
} CleanResult;

static CleanResult
clean_failed(FileSource *fs, const char *name, const char *what, const char *path)
{
	ereport(WARNING,
			(errcode_for_file_access(),
			 errmsg("could not %s file \"%s\" of source \"%s\": %m", what, path, fs->base.name),
			 errdetail("The file was read; clean_source tries again when the source is next opened (a new worker, the next run_batch).")));
	(void) name_add(fs->reported, name);
	return CLEAN_FAILED;
}

/*
 * Copy path to target, which must not exist yet: 1 done, 0 target exists,
 * -1 failed (reported).
 */
static int
copy_file(FileSource *fs, const char *name, const char *path, const char *target)
{
	int			in = OpenTransientFile(path, O_RDONLY | PG_BINARY);
	int			out = -1;
	char	   *buf = palloc(BLCKSZ * 8);
	ssize_t		n = -1;
	bool		ok;
	int			save_errno;

	if (in >= 0)
		out = OpenTransientFile(target, O_WRONLY | O_CREAT | O_EXCL | PG_BINARY);
	if (out < 0)
	{
		save_errno = errno;
		if (in >= 0)
			CloseTransientFile(in);
		errno = save_errno;
		if (in >= 0 && errno == EEXIST)
			return 0;
		(void) clean_failed(fs, name, "archive", path);
		return -1;
	}
	errno = 0;
	while ((n = read(in, buf, BLCKSZ * 8)) > 0)
		if (write(out, buf, n) != n)
			break;
	ok = n == 0 && pg_fsync(out) == 0;
	save_errno = errno ? errno : ENOSPC;
	ok &= CloseTransientFile(out) == 0;
	CloseTransientFile(in);
	if (!ok)
	{
		unlink(target);
		errno = save_errno;
		(void) clean_failed(fs, name, "archive", path);
		return -1;
	}
	return 1;
}

/*
 * Move a file into archive_directory under its own name, or name.1, name.2,
 * ... when that is taken: a hard link (which never replaces a file), or a
 * copy opened with O_EXCL where links cannot go (another file system); then
 * the file is removed.
 */
static CleanResult
archive_file(FileSource *fs, const char *name, const char *path, const struct stat *st)
{
	for (int n = 0;; n++)
	{
		char	   *target = file_path(fs->archive_directory,
									   n == 0 ? name : psprintf("%s.%d", name, n));
		struct stat tst;
		int			copied;

		if (link(path, target) == 0)
			break;
		if (errno == EEXIST)
		{
			/* linked by an earlier try that did not get to remove the file */
			if (stat(target, &tst) == 0 && tst.st_dev == st->st_dev && tst.st_ino == st->st_ino)
				break;
			continue;
		}
		if (errno != EXDEV && errno != EPERM && errno != EMLINK && errno != ENOTSUP)
			return clean_failed(fs, name, "archive", path);
		copied = copy_file(fs, name, path, target);
		if (copied < 0)
			return CLEAN_FAILED;
		if (copied > 0)
			break;
	}
	if (unlink(path) != 0 && errno != ENOENT)
		return clean_failed(fs, name, "remove archived", path);
	return CLEANED;
}

/* Delete or archive one file, if it is still the one that was read. */
static CleanResult
clean_file(FileSource *fs, const char *name, int64 size, TimestampTz mtime)
{
	char	   *path = file_path(fs->directory, name);
	struct stat st;

	if (stat(path, &st) != 0)
		return errno == ENOENT ? CLEAN_GONE : clean_failed(fs, name, "delete", path);
	/* a new file of the name: left alone (and never read) */
	if (!S_ISREG(st.st_mode) || st.st_size != size || stat_mtime(&st) != mtime)
		return CLEAN_GONE;
	if (fs->clean == CLEAN_ARCHIVE)
		return archive_file(fs, name, path, &st);
	if (unlink(path) != 0 && errno != ENOENT)
		return clean_failed(fs, name, "delete", path);
	return CLEANED;
}

/* Is any of the transaction ids (comma-separated) this transaction's? */
static bool
written_here(char *xids)
{
	char	   *tok;
	char	   *save;

	if (xids == NULL)
		return false;
	for (tok = strtok_r(xids, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (TransactionIdIsCurrentTransactionId((TransactionId) strtoul(tok, NULL, 10)))
			return true;
	return false;
}

/*
 * clean_source: delete or archive the files that committed batches of the
 * stream read, once every stream of the source is done with them (read
 * them, or never will), and record it in streaming.files.  In the current
 * transaction (a batch's plan, or after_commit's own); files that this
 * transaction read (an earlier run_batch in it) wait, as it may roll back.
 * Files whose clean-up failed in this runtime are not tried again in it.
 */
typedef struct CleanCandidate
{
	char	   *name;
	int64		size;
	TimestampTz mtime;
	char	   *xmins;			/* of every stream's row of the file */
	bool		unread;			/* a stream of the source has not read it */
} CleanCandidate;

static void
clean_candidate(void *arg, HeapTuple tuple, TupleDesc desc)
{
	List	  **list = arg;
	CleanCandidate *c = palloc(sizeof(CleanCandidate));
	bool		isnull;

	c->name = stm_sql_get_text(tuple, desc, "file_name");
	c->size = DatumGetInt64(stm_sql_get_datum(tuple, desc, "size", &isnull));
	c->mtime = DatumGetTimestampTz(stm_sql_get_datum(tuple, desc, "mtime", &isnull));
	c->xmins = stm_sql_get_text(tuple, desc, "xmins");
	c->unread = DatumGetBool(stm_sql_get_datum(tuple, desc, "unread", &isnull));
	*list = lappend(*list, c);
}

static void
clean_files(FileSource *fs, int32 stream_id)
{
	List	   *candidates = NIL;
	List	   *done = NIL;
	bool		removed = false;
	ListCell   *lc;
	StmSql		q;

	/* a join's stream may read the source as its second */
	stm_sql_init(&q, "SELECT f.file_name, f.size, f.mtime, "
				 "(SELECT string_agg(g.xmin::text, ',') FROM streaming.files g "
				 " JOIN streaming.stream_defs d ON d.id = g.stream_id "
				 " WHERE :source IN (d.source, d.other_source) AND g.file_name = f.file_name) AS xmins, "
				 "EXISTS (SELECT FROM streaming.stream_defs d WHERE :source IN (d.source, d.other_source) "
				 " AND NOT EXISTS (SELECT FROM streaming.files g WHERE g.stream_id = d.id "
				 " AND g.file_name = f.file_name)) AS unread "
				 "FROM streaming.files f "
				 "WHERE f.stream_id = :stream_id AND f.batch_id IS NOT NULL AND f.cleaned_at IS NULL");
	stm_sql_int4(&q, "stream_id", stream_id);
	stm_sql_text(&q, "source", fs->base.name);
	(void) stm_catalog_run(&q, SPI_OK_SELECT, clean_candidate, &candidates);
	foreach(lc, candidates)
	{
		CleanCandidate *c = lfirst(lc);
		CleanResult result;

		if (c->unread || written_here(c->xmins) || name_in(fs->reported, c->name))
			continue;
		result = clean_file(fs, c->name, c->size, c->mtime);
		if (result != CLEAN_FAILED)
			done = lappend(done, c->name);
		removed |= (result == CLEANED);
	}
	if (done != NIL)
	{
		stm_sql_init(&q, "UPDATE streaming.files SET cleaned_at = now() "
					 "WHERE stream_id = :stream_id AND file_name = ANY (:names)");
		stm_sql_int4(&q, "stream_id", stream_id);
		stm_sql_param(&q, "names", TEXTARRAYOID, PointerGetDatum(text_array(done)), false);
		(void) stm_catalog_run(&q, SPI_OK_UPDATE, NULL, NULL);
	}
	/* the removals last, as far as the file systems go */
	if (removed)
	{
		(void) fsync_fname_ext(fs->directory, true, true, WARNING);
		if (fs->clean == CLEAN_ARCHIVE)
			(void) fsync_fname_ext(fs->archive_directory, true, true, WARNING);
	}
}

/* After the batch's commit, outside its transaction: clean its files now. */
static void
file_after_commit(StmSource *src, int32 stream_id)
{
	FileSource *fs = (FileSource *) src;
	MemoryContext cxt = CurrentMemoryContext;

	if (fs->clean == CLEAN_OFF)
		return;
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	clean_files(fs, stream_id);
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
}

/* ---- process_available, reset -------------------------------------------- */

/* The directory's files that the stream has not read yet (a List of names). */
static void *
file_available(StmSource *src, int32 stream_id)
{
	FileSource *fs = (FileSource *) src;
	List	   *names = NIL;
	ListCell   *lc;

	foreach(lc, unread_files(fs, stream_id))
		names = lappend(names, ((FileEntry *) lfirst(lc))->name);
	return names;
}

/* Has the stream read (or set aside) every file file_available saw? */
static bool
file_reached(StmSource *src, int32 stream_id, void *available)
{
	Oid			types[2] = {INT4OID, TEXTARRAYOID};
	Datum		values[2] = {Int32GetDatum(stream_id), PointerGetDatum(text_array(available))};
	bool		isnull;
	Datum		reached;

	reached = stm_catalog_value("SELECT NOT EXISTS (SELECT FROM unnest($2) AS f(name) WHERE NOT EXISTS "
								"(SELECT FROM streaming.files p WHERE p.stream_id = $1 AND p.file_name = f.name))",
								2, types, values, &isnull);
	return !isnull && DatumGetBool(reached);
}

/* reset: the stream forgets which files it read (they are read again). */
static void
file_reset_positions(int32 stream_id)
{
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(stream_id);

	stm_catalog_exec("DELETE FROM streaming.files WHERE stream_id = $1",
					 1, &type, &value, NULL, SPI_OK_DELETE);
}

/* ---- create time --------------------------------------------------------- */

static List *
file_metadata_columns(Jsonb *options)
{
	static const StmMetaColumn columns[] = {
		{"file_name", "pg_catalog.text"},
		{"file_line", "pg_catalog.int8"}
	};

	return list_make2((void *) &columns[0], (void *) &columns[1]);
}

/* A directory argument: absolute, canonical, an existing directory. */
static char *
check_directory(const char *argname, const char *given)
{
	char	   *dir = pstrdup(given);
	struct stat st;

	if (!is_absolute_path(dir))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be an absolute path", argname),
				 errdetail("The %s given was \"%s\".", argname, given)));
	canonicalize_path(dir);
	if (stat(dir, &st) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open %s \"%s\": %m", argname, dir),
				 errhint("Give an existing directory that the server can read.")));
	if (!S_ISDIR(st.st_mode))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s \"%s\" is not a directory", argname, dir)));
	return dir;
}

/* A path with every symbolic link resolved. */
static char *
real_path(const char *argname, const char *path)
{
	char	   *resolved = realpath(path, NULL);
	char	   *result;

	if (resolved == NULL)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not resolve %s \"%s\": %m", argname, path)));
	result = pstrdup(resolved);
	free(resolved);
	return result;
}

/* create_file_source's arguments (SPEC 2.2) */
static Jsonb *
file_validate(Jsonb *o, Oid role)
{
	static const char *const formats[] = {"csv", "json", "text", NULL};
	static const char *const cleans[] = {"off", "delete", "archive", NULL};
	static const char *const required[] = {"directory", "format", "pattern", "csv_header",
	"csv_delimiter", "latest_first", "clean_source", "on_bad_record", NULL};
	char	   *format;
	char	   *clean;
	char	   *on_bad_record;
	char	   *delimiter;
	char	   *pattern;
	char	   *directory;
	char	   *archive = NULL;
	bool		has_columns = stm_option_given(o, "columns");
	DIR		   *dir;

	stm_source_require_options(o, required);
	format = stm_arg_lower(stm_option_text(o, "format"));
	clean = stm_arg_lower(stm_option_text(o, "clean_source"));
	on_bad_record = stm_arg_lower(stm_option_text(o, "on_bad_record"));
	delimiter = stm_option_text(o, "csv_delimiter");
	pattern = stm_option_text(o, "pattern");

	/* who may read (and remove) server files, before any file is looked at */
	if (!may_use_files(role, false))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be superuser or have privileges of the pg_read_server_files role to create a file source"),
				 errdetail("File sources read server files, as COPY FROM a file does.")));
	if (strcmp(clean, "off") != 0 && !may_use_files(role, true))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be superuser or have privileges of the pg_write_server_files role to create a file source with clean_source"),
				 errdetail("clean_source deletes or moves server files.")));

	stm_arg_check_choice("format", format, formats,
						 "Valid formats are \"csv\", \"json\" and \"text\".");
	stm_source_check_columns(format, has_columns);
	if (strcmp(format, "csv") != 0 &&
		(stm_option_bool(o, "csv_header", false) || strcmp(delimiter, ",") != 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("csv_header and csv_delimiter apply to format \"csv\" only"),
				 errdetail("The format given was \"%s\".", format)));
	if (strlen(delimiter) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("csv_delimiter must be a single one-byte character"),
				 errdetail("The csv_delimiter given was \"%s\".", delimiter)));
	if (delimiter[0] == '\n' || delimiter[0] == '\r' || delimiter[0] == '"')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("csv_delimiter cannot be newline, carriage return or the quote character \"\"\"")));
	/* and whatever else COPY would refuse when it reads the files */
	if (strcmp(format, "csv") == 0)
	{
		CopyFormatOptions copy_opts = {0};

		STM_ARG_ERRCONTEXT_BEGIN("csv_delimiter", delimiter);
		ProcessCopyOptions(NULL, &copy_opts, true, csv_options(delimiter));
		STM_ARG_ERRCONTEXT_END();
	}
	if (pattern[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pattern must not be empty"),
				 errhint("The default '*' matches every file name.")));
	if (strchr(pattern, '/') != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pattern must not contain \"/\""),
				 errdetail("The pattern is matched against the names of the files in the directory; subdirectories are not read.")));
	stm_source_check_positive(o, "max_files_per_trigger");
	stm_source_check_positive_interval(o, "max_file_age");
	stm_arg_check_choice("clean_source", clean, cleans,
						 "Valid values are \"off\", \"delete\" and \"archive\".");
	stm_source_check_on_bad_record(on_bad_record);

	directory = check_directory("directory", stm_option_text(o, "directory"));
	dir = AllocateDir(directory);
	if (dir == NULL)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open directory \"%s\": %m", directory),
				 errhint("Give an existing directory that the server can read.")));
	FreeDir(dir);

	if (strcmp(clean, "archive") == 0)
	{
		char	   *dir_real;
		char	   *archive_real;
		size_t		dirlen;

		if (!stm_option_given(o, "archive_directory"))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("clean_source => 'archive' needs archive_directory"),
					 errhint("Give an existing, writable directory outside the source's directory.")));
		archive = check_directory("archive_directory", stm_option_text(o, "archive_directory"));
		if (access(archive, W_OK | X_OK) != 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("archive_directory \"%s\" is not writable: %m", archive)));
		dir_real = real_path("directory", directory);
		archive_real = real_path("archive_directory", archive);
		dirlen = strlen(dir_real);
		if (strcmp(dir_real, "/") == 0 ||
			(strncmp(archive_real, dir_real, dirlen) == 0 &&
			 (archive_real[dirlen] == '\0' || archive_real[dirlen] == '/')))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("archive_directory must lie outside the source's directory"),
					 errdetail("Its real path \"%s\" lies in \"%s\", the real path of directory.",
							   archive_real, dir_real)));
	}
	else if (stm_option_given(o, "archive_directory"))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("archive_directory is only used with clean_source => 'archive'"),
				 errdetail("The clean_source given was \"%s\".", clean)));

	/* keywords and paths are stored as normalised */
	o = stm_option_set_text(o, "format", format);
	o = stm_option_set_text(o, "clean_source", clean);
	o = stm_option_set_text(o, "on_bad_record", on_bad_record);
	o = stm_option_set_text(o, "directory", directory);
	if (archive)
		o = stm_option_set_text(o, "archive_directory", archive);
	return o;
}

const StmSourceRoutine stm_file_source = {
	.kind = "file",
	.display_name = "file",
	.validate = file_validate,
	.metadata_columns = file_metadata_columns,
	.open = file_open,
	.plan = file_plan,
	.positions_json = file_positions_json,
	.fetch = file_fetch,
	.share_bounds = file_share_bounds,
	.set_share_bounds = file_set_share_bounds,
	.share_parts = file_share_parts,
	.ordered_parts = true,
	.fill_metadata = file_fill_metadata,
	.position_json = file_position_json,
	.save_positions = file_save_positions,
	.save_idle_positions = file_save_idle_positions,
	.data_loss_json = NULL,
	.available = file_available,
	.reached = file_reached,
	.after_commit = file_after_commit,
	.reset_positions = file_reset_positions,
	.close = NULL
};

/* streaming.create_file_source(name, directory, ...) */
Datum
streaming_create_file_source(PG_FUNCTION_ARGS)
{
	return stm_api_create_source(fcinfo, &stm_file_source);
}
