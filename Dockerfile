FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY lua ./lua
COPY proto ./proto
RUN pip install --no-cache-dir -e .
EXPOSE 9092 6650 8080
ENTRYPOINT ["gateway", "serve"]
