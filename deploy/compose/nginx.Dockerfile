# nginx from Debian's packages, with curl for the healthcheck; the
# configuration is mounted by docker-compose.yml.
#   docker build -f deploy/compose/nginx.Dockerfile -t ebb-waf .
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
	&& apt-get install -y --no-install-recommends nginx-light curl \
	&& rm -rf /var/lib/apt/lists/* /etc/nginx/sites-enabled/default
# SIGQUIT: nginx's graceful stop (SIGTERM is its fast one).
STOPSIGNAL SIGQUIT
EXPOSE 80
CMD ["nginx", "-g", "daemon off;"]
