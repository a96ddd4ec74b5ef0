/*
 * test/plugin_marker.c: a librdkafka plugin that does nothing but leave a
 * marker file next to itself ("<path of this .so>.loaded") when a client
 * loads it.  test/t/009_security.pl uses it to see whether a
 * plugin.library.paths property reached librdkafka: with a superuser's
 * source it must, smuggled into an ordinary role's source it must not.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

rd_kafka_resp_err_t conf_init(rd_kafka_conf_t *conf, void **plug_opaquep,
							  char *errstr, size_t errstr_size);

rd_kafka_resp_err_t
conf_init(rd_kafka_conf_t *conf, void **plug_opaquep, char *errstr,
		  size_t errstr_size)
{
	Dl_info		info;
	char		path[4096];
	FILE	   *f;

	if (dladdr((void *) conf_init, &info) && info.dli_fname)
	{
		snprintf(path, sizeof(path), "%s.loaded", info.dli_fname);
		f = fopen(path, "w");
		if (f)
		{
			fprintf(f, "loaded by process %d\n", (int) getpid());
			fclose(f);
		}
	}
	return RD_KAFKA_RESP_ERR_NO_ERROR;
}
